"""A REAL full disk (a small tmpfs studio home, tmpfs_home.py) while a job runs: the run store's
next metric write fails with SQLite's "database or disk is full". The job must fail saying "no
space left on device", the dispatcher must live on (starts and uploads are refused with 507
while the disk is full), the store must agree with the API once space returns, and the next job
must run to the end. And when the outputs' disk fills during a checkpoint write (torch's zip
writer then says only "PytorchStreamWriter failed writing file"), the job says "no space left
on device" with the folder and the space free."""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image
from reliability_helpers import FINAL, live_server, record_figure, wait_for
from tmpfs_home import fill, small_disk

from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.fixture
def disk_settings(tmp_path: Path, sample_dataset: Path) -> Iterator[Settings]:
    """Settings on a studio home on an 8 MB tmpfs, with datasets/shapes."""
    with small_disk(tmp_path / "disk", 8) as mount:
        settings = Settings(home=mount / "lorastudio").ensure_dirs()
        shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
        yield settings


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


def test_a_real_full_disk_fails_the_job_and_the_service_goes_on(
    disk_settings: Settings, flux_config: Callable[..., dict]
) -> None:
    settings = disk_settings
    with live_server(create_app(settings)) as server:
        client, service = server.client, server.app.state.service
        started = client.post("/api/train/start", json={"config": flux_config(output_name="big", steps=5000)})
        assert started.status_code == 201, started.text
        job_id = started.json()["id"]
        wait_for(lambda: service.job(job_id)["steps_run"] >= 1, 120, "the first step", 0.02)

        filler = fill(settings.home)  # the disk is full now: the next metric write fails
        t0 = time.monotonic()
        job = wait_for(lambda: (j := service.job(job_id))["status"] in FINAL and j, 60, "the job's end", 0.02)
        failed_s = time.monotonic() - t0
        assert job["status"] == "failed", job
        assert job["error"].startswith("no space left on device"), job["error"]
        assert service._thread.is_alive(), "the dispatcher thread died"
        wait_for(lambda: service.status()["job"]["pid"] and not service._worker, 30, "the worker's end", 0.05)

        refused = client.post("/api/train/start", json={"config": flux_config(output_name="next", steps=2)})
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"] == "NoSpaceLeft" and "no space left" in refused.json()["detail"]
        upload = client.post(
            "/api/datasets/shapes/files", files=[("files", ("new.png", _png(), "image/png"))]
        )
        assert upload.status_code == 507, upload.text
        assert "no space left on device" in upload.json()["detail"]
        assert not list((settings.datasets_dir / ".uploads").glob("*")), "the refused upload left files"
        image = sorted((settings.datasets_dir / "shapes").glob("*.png"))[0].name
        caption = client.put(f"/api/datasets/shapes/captions/{image}", json={"caption": "x" * 5000})
        assert caption.status_code == 507 and "no space left on device" in caption.json()["detail"], (
            caption.text
        )

        filler.unlink()  # space returns: the store is told the job's end, the next job runs
        record = wait_for(
            lambda: (r := client.get(f"/api/runs/{job_id}").json())["status"] in FINAL and r,
            10,
            "the store to agree",
            0.05,
        )
        assert record["status"] == "failed" and record["error"] == job["error"], record
        nxt = client.post("/api/train/start", json={"config": flux_config(output_name="next", steps=2)})
        assert nxt.status_code == 201, nxt.text
        done = wait_for(
            lambda: (j := service.job(nxt.json()["id"]))["status"] in FINAL and j, 120, "the next job", 0.05
        )
        assert done["status"] == "completed", done
        assert client.get(f"/api/runs/{done['id']}").json()["status"] == "completed"
    record_figure(
        "disk_full_real_tmpfs",
        {"disk_mb": 8, "job_failed_after_full_s": round(failed_s, 2), "error": job["error"][:80]},
    )


def test_a_full_outputs_disk_during_a_checkpoint_says_no_space_left(
    disk_settings: Settings, flux_config: Callable[..., dict]
) -> None:
    settings = disk_settings
    with small_disk(settings.outputs_dir, 4) as outputs, live_server(create_app(settings)) as server:
        client, service = server.client, server.app.state.service
        config = flux_config(output_name="ckpt", steps=5000, save_every=2, keep_last=1)
        started = client.post("/api/train/start", json={"config": config})
        assert started.status_code == 201, started.text
        job_id = started.json()["id"]
        wait_for(lambda: service.job(job_id)["steps_run"] >= 1, 120, "the first step", 0.02)
        filler = fill(outputs)  # the run store's disk keeps room: only the worker's writes fail
        job = wait_for(
            lambda: (j := service.job(job_id))["status"] in FINAL and j, 120, "the job's end", 0.02
        )
        assert job["status"] == "failed", job
        error = job["error"]
        assert error.startswith("no space left on device"), error  # the checkpoint named (fix 1070)
        assert str(outputs / "ckpt") in error and "MB free" in error, error
        assert "PytorchStreamWriter" not in error and "Traceback" not in error, error
        assert client.get(f"/api/runs/{job_id}").json()["error"] == error  # the store agrees at once
        filler.unlink()
    record_figure("disk_full_real_checkpoint", {"outputs_disk_mb": 4, "error": error[:90]})
