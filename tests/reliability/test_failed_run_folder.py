"""A fresh run whose processes die before it wrote a file (a worker killed, a rank failed and
the others stopped by torchrun) leaves no empty folder in outputs/: the job service (after the
worker's exit) and a `lorastudio train --gpus N` launch (after torchrun's failure) remove it,
with rmdir only, while the log and the run record stay (a CLI launch's record, and the command,
naming the rank that died: RELIABILITY 391). Was: the folder stayed until the next
server start or `lorastudio train`. What no run writes (training/resume/run_files.py: a user's file or
folder, even an empty one) keeps the folder, logged; a killed write's staging goes."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability_helpers import FINAL, LiveServer, wait_for
from tests.process_tree import descendants

from lorastudio.jobs.store import RunStore
from lorastudio.jobs.worker_log import log_path
from lorastudio.settings import Settings


def _user_entries(run_dir: Path) -> None:
    """What a user puts into a running run's folder, beside a killed sample write's staging."""
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "mine").mkdir()
    (run_dir / "mine" / "keep.txt").write_text("mine too")
    (run_dir / "empty").mkdir()
    (run_dir / "samples").mkdir(exist_ok=True)
    (run_dir / "samples" / ".staging-0123abcd.png").write_bytes(b"half a sample")


def _kill_at_step_1(server: LiveServer, config: dict, user_file: bool = False) -> dict:
    service = server.app.state.service
    started = server.client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    wait_for(lambda: (service.job(job_id)["progress"] or {}).get("step", 0) >= 1, 120, "step 1", 0.02)
    run_dir = server.app.state.settings.outputs_dir / config["output_name"]
    assert run_dir.is_dir()
    if user_file:
        _user_entries(run_dir)
    os.kill(service.job(job_id)["pid"], signal.SIGKILL)
    return wait_for(lambda: (s := service.job(job_id))["status"] in FINAL and s, 30, "the job's end", 0.02)


def test_a_killed_fresh_job_leaves_no_empty_folder(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    job = _kill_at_step_1(server, flux_config(output_name="killed", steps=5000))
    assert job["status"] == "failed"
    assert not (settings.outputs_dir / "killed").exists()
    assert log_path(settings, job["id"]).is_file()  # the log stays
    record = server.client.get(f"/api/runs/{job['id']}").json()
    assert record["status"] == "failed"  # and so does the record
    # the name is free for the next run at once
    config = flux_config(output_name="killed", steps=1)
    again = server.client.post("/api/train/start", json={"config": config})
    assert again.status_code == 201, again.text
    service = server.app.state.service
    done = wait_for(lambda: (s := service.job(again.json()["id"]))["status"] in FINAL and s, 120, "rerun")
    assert done["status"] == "completed", done["error"]


def test_a_users_file_keeps_the_folder(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    job = _kill_at_step_1(server, flux_config(output_name="kept", steps=5000), user_file=True)
    assert job["status"] == "failed"
    run_dir = settings.outputs_dir / "kept"
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert (run_dir / "mine" / "keep.txt").read_text() == "mine too"
    assert (run_dir / "empty").is_dir()
    assert not (run_dir / "samples" / ".staging-0123abcd.png").exists()  # a killed write's staging


def test_a_users_empty_folder_keeps_the_run_folder(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict], caplog: pytest.LogCaptureFixture
) -> None:
    """Was: a folder holding nothing but folders went whole, a user's empty folder with it."""
    caplog.set_level(logging.WARNING, logger="lorastudio.jobs")
    service = server.app.state.service
    started = server.client.post(
        "/api/train/start", json={"config": flux_config(output_name="bare", steps=5000)}
    )
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    wait_for(lambda: (service.job(job_id)["progress"] or {}).get("step", 0) >= 1, 120, "step 1", 0.02)
    run_dir = settings.outputs_dir / "bare"
    (run_dir / "empty").mkdir()
    os.kill(service.job(job_id)["pid"], signal.SIGKILL)
    wait_for(lambda: service.job(job_id)["status"] in FINAL, 30, "the job's end", 0.02)
    assert (run_dir / "empty").is_dir()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"kept 1 folder not written by the run in {run_dir}: empty/" in logged


def _rank_pid(launch: int, rank: int, timeout: float = 120) -> int:
    """The pid of rank `rank` among the processes of the launch `launch` started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in descendants(launch):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in environ:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank}")


def _wrote_samples_and_snapshot(run_dir: Path) -> bool:
    return any((run_dir / "samples").glob("step-*.png")) and any((run_dir / "loras").glob("*.safetensors"))


# before-a-file is slow (~12 CPU s: a 2-rank launch): after-samples-and-a-snapshot goes through the
# same launch, kill and report and removes the folder it emptied; an empty folder's removal after a
# killed job's worker is test_a_killed_fresh_job_leaves_no_empty_folder's
@pytest.mark.parametrize(
    "writing",
    [
        pytest.param(False, id="before-a-file", marks=pytest.mark.slow),
        pytest.param(True, id="after-samples-and-a-snapshot"),
    ],
)
def test_a_cli_launch_whose_rank_died_leaves_no_empty_folder(
    tmp_path: Path, settings: Settings, shapes: Path, flux_config: Callable[..., dict], writing: bool
) -> None:
    """A fresh 2-rank run whose rank 1 is killed: nothing of it stays, samples and LoRA snapshots
    rank 0 wrote too (fix 164: the run created and marked its folder)."""
    writes = {"sample_every": 1, "sample_prompts": ["a red square"], "sample_steps": 2, "save_lora_every": 1}
    raw = {
        **flux_config(output_name="dp-dead", steps=5000, batch_size=2, **(writes if writing else {})),
        "data_dir": str(shapes),
    }
    config = tmp_path / "run.json"
    config.write_text(json.dumps(raw))
    cmd = [sys.executable, "-m", "lorastudio.cli", "train", str(config), "--gpus", "2", "--device", "cpu"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ)
    )
    run_dir = settings.outputs_dir / "dp-dead"
    wait_for(lambda: run_dir.is_dir() or proc.poll() is not None, 180, "the run folder", 0.05)
    assert proc.poll() is None, proc.communicate()[0]
    if writing:
        wait_for(
            lambda: _wrote_samples_and_snapshot(run_dir) or proc.poll() is not None,
            240,
            "samples and a snapshot",
            0.05,
        )
        assert proc.poll() is None, proc.communicate()[0]
    rank_1 = _rank_pid(proc.pid, 1)
    os.kill(rank_1, signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert not run_dir.exists(), out
    # the command and the run's record name the dead rank (RELIABILITY 391), not rank 0's broken
    # collective ("RuntimeError: [...gloo...] Connection reset by peer") nor "interrupted"
    cause = f"rank 1 of 2 (pid {rank_1}) died without finishing (killed by SIGKILL)"
    assert f"error: {cause}" in " ".join(out.split()), out
    store = RunStore.open(settings.db_path)
    try:
        (record,) = [r for r in store.list_runs() if r["output_name"] == "dp-dead"]
        assert record["status"] == "failed" and record["error"].startswith(cause), record
    finally:
        store.close()
