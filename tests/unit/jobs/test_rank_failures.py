"""A data-parallel job (2 gloo ranks on the CPU, launched by the job service through torchrun as
GPU ranks are: settings.cpu_data_parallel) whose ranks fail in only one of them: the job must fail
naming the rank that failed and why, within seconds, with every process of the job gone and
nothing of the run written.

torchrun tears the group down (SIGTERM to the others) the moment one rank exits non-zero, so the
healthy rank's connection ends without a "done" too: that is the casualty, not the cause.
"""

from __future__ import annotations

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


def test_an_image_only_rank_1_reads_fails_the_job_naming_rank_1_and_the_image(
    service: JobService, settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """An image whose header is sound but whose pixels do not decode: the job is accepted, every
    rank scans the dataset, and only the rank whose share it is decodes it: rank 1 encodes the
    odd images (training/latents.py round-robin), so shape_01.png fails in rank 1 only."""
    image = shapes / "shape_01.png"
    image.write_bytes(_undecodable(image.read_bytes()))
    job = service.submit(dp_config(tiny_model("flux"), num_gpus=2, output_name="broken"))
    snap = wait_job(service, job["id"], lambda s: s["status"] in FINAL, 120, "the failure")
    assert snap["status"] == "failed"
    assert snap["error"].startswith("rank 1 of 2 failed: "), snap["error"]
    assert "shape_01.png" in snap["error"], snap["error"]
    assert "rank 0" not in snap["error"]  # torchrun's SIGTERM to rank 0 is not the cause
    agent = snap["pid"]
    wait_job(service, job["id"], lambda s: not process_alive(agent), 10, "the agent's exit")
    assert service.arbiter.training_job is None
    # nothing of the run written, and no empty folder left (RELIABILITY 140): removed once every
    # process of the job is gone
    wait_job(service, job["id"], lambda s: not (settings.outputs_dir / "broken").exists(), 10, "no folder")
