"""A data-parallel job (2 gloo ranks on the CPU, launched by the job service through torchrun as
GPU ranks are: settings.cpu_data_parallel) whose ranks fail in only one of them: the job must fail
naming the rank that failed and why, within seconds, with every process of the job gone and
nothing of the run written.

torchrun tears the group down (SIGTERM to the others) the moment one rank exits non-zero, so the
healthy rank's connection ends without a "done" too: that is the casualty, not the cause.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from dp_jobs import FINAL, dp_config, wait_job
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.processes import process_alive
from lorastudio.settings import Settings

pytestmark = pytest.mark.slow  # a torchrun launch of two CPU ranks: ~15-40 s on 2 cores


def _undecodable(png: bytes) -> bytes:
    """`png` with its pixel data (IDAT) replaced by a broken zlib stream, every chunk's CRC
    right: the header check every rank's dataset scan makes passes, only decoding it fails."""
    out, pos = [png[:8]], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IDAT":
            body = b"\x78\x9c" + b"\xff" * (len(body) - 2)
        out.append(struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body)))
        pos += 12 + length
    return b"".join(out)


@pytest.fixture
def service(settings: Settings, shapes: Path) -> JobService:
    dp = settings.model_copy(update={"cpu_data_parallel": True})
    service = JobService(dp, RunStore.open(dp.db_path), GpuArbiter()).start()
    yield service
    service.shutdown()


def test_an_image_broken_after_the_submit_fails_the_job_naming_the_rank_and_the_image(
    service: JobService, settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """An image whose header is sound but whose pixels do not decode, written after the submit's
    check passed (its decode record no longer matches: decoded again): rank 0's preflight, which
    runs alone before the others (RELIABILITY 213), meets it and tells the other rank, which
    meets it too; the job fails with the dataset's error naming the image, every process gone, nothing
    written. (Before fix 151 the checks did not decode and only rank 1, whose share the image
    is, met it; now the submit itself refuses an image already broken.)"""
    image = shapes / "shape_01.png"
    job = service.submit(dp_config(tiny_model("flux"), num_gpus=2, output_name="broken"))
    image.write_bytes(_undecodable(image.read_bytes()))  # the ranks' import takes seconds
    snap = wait_job(service, job["id"], lambda s: s["status"] in FINAL, 120, "the failure")
    assert snap["status"] == "failed"
    # the dataset's own error, as a single process reports it (the launcher does not blame a rank
    # for a refused dataset), naming the image
    assert re.search(r"datasets/shapes cannot be used .*\n  - shape_01\.png: corrupt", snap["error"]), snap[
        "error"
    ]
    assert "SIGTERM" not in snap["error"]  # torchrun's SIGTERM to the other rank is not the cause
    agent = snap["pid"]
    wait_job(service, job["id"], lambda s: not process_alive(agent), 10, "the agent's exit")
    assert service.arbiter.training_job is None
    # nothing of the run written, and no empty folder left (RELIABILITY 140): removed once every
    # process of the job is gone
    wait_job(service, job["id"], lambda s: not (settings.outputs_dir / "broken").exists(), 10, "no folder")
