"""Crash leftovers (jobs/leftovers.py): what a kill -9 leaves of an upload, a run delete, a model
delete, a tiny model's staging, a LoRA export, a checkpoint write and a caption edit is removed
when the next server starts on the home (it holds the home lock, so nothing else owns them),
in the background, each logged with its size; everything else in the home stays."""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from reliability_helpers import live_server, record_figure, wait_for

from lorastudio.api.app import create_app
from lorastudio.settings import Settings

DELETED_RUN_FILES = 3000


def _files(folder: Path, count: int, size: int = 16) -> Path:
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"f{i}.bin").write_bytes(b"x" * size)
    return folder


def test_the_next_server_removes_crash_leftovers_and_keeps_the_rest(
    settings: Settings, shapes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hexid = uuid.uuid4().hex
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftovers = [
        _files(settings.datasets_dir / ".uploads" / hexid, 3, 4 << 20),  # a killed upload: 12 MB
        _files(settings.outputs_dir / f".deleting-{hexid}", DELETED_RUN_FILES),  # a killed run delete
        _files(settings.datasets_dir / f".deleting-{hexid}", 3),  # a killed dataset delete
        _files(settings.models_dir / ".old.deleting-1a2b3c4d", 2),  # a killed model delete
        _files(settings.models_dir / f".tiny-flux.staging-{dead.pid}-1a2b3c4d", 2),  # its writer is dead
        _files(settings.outputs_dir / "run1" / ".staging-1a2b3c4d", 2),  # a killed LoRA export
        _files(settings.outputs_dir / "run1" / "loras" / ".staging-9c8d7e6f", 2),  # a killed LoRA snapshot
        _files(settings.outputs_dir / "run1" / "checkpoints" / ".staging-5e6f7a8b", 2),
        _files(settings.outputs_dir / "run1" / "checkpoints" / ".removing-5e6f7a8b", 2),
    ]
    # a run killed before it wrote a file (loading, caching, its first checkpoint's staging
    # removed above): an output folder with nothing in it, which refused its name for ever
    leftovers += [settings.outputs_dir / "early", settings.outputs_dir / "early-ckpt"]
    (settings.outputs_dir / "early").mkdir()
    _files(
        settings.outputs_dir / "early-ckpt" / "checkpoints" / ".staging-0a1b2c3d", 1
    )  # killed in its write
    caption_tmp = shapes / f".{sorted(shapes.glob('*.txt'))[0].name}.{hexid}.tmp"
    caption_tmp.write_text("half a caption")
    leftovers.append(caption_tmp)
    kept = [
        _files(settings.models_dir / f".tiny-sdxl.staging-{os.getpid()}-1a2b3c4d", 1),  # its writer lives
        _files(settings.models_dir / ".owner--name.fetching", 1),  # a fetch resumes it
        _files(settings.outputs_dir / "run1" / "checkpoints" / "step-000002", 2),
        _files(settings.outputs_dir / "run1" / "loras" / "staging-not-hidden", 1),
        _files(settings.datasets_dir / "deleting-not-hidden", 1),
    ]
    lora = settings.outputs_dir / "run1" / "run1.safetensors"
    lora.write_bytes(b"lora")
    kept.append(lora)
    before = sorted(p.name for p in shapes.iterdir() if p != caption_tmp)

    caplog.set_level(logging.WARNING, logger="lorastudio.jobs")
    t0 = time.monotonic()
    with live_server(create_app(settings)) as server:
        started_s = time.monotonic() - t0
        assert server.client.get("/api/info").status_code == 200
        wait_for(lambda: not any(p.exists() for p in leftovers), 60, "the leftovers' removal", 0.05)
        removed_s = time.monotonic() - t0
    assert all(p.exists() for p in kept), [str(p) for p in kept if not p.exists()]
    assert sorted(p.name for p in shapes.iterdir()) == before
    assert not (settings.datasets_dir / ".uploads").exists()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f".deleting-{hexid} ({DELETED_RUN_FILES} files" in logged, logged
    assert f".uploads/{hexid} (3 files, 12.0 MB)" in logged, logged
    record_figure(
        "crash_leftovers_removed_at_start",
        {
            "files": DELETED_RUN_FILES + 17,
            "server_up_s": round(started_s, 2),
            "all_removed_s": round(removed_s, 2),
        },
    )
