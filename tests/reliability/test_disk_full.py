"""A full disk during a checkpoint write or the final LoRA save, simulated in the real worker
subprocess: fault_workers writes half of the file, then raises OSError(ENOSPC) exactly as a full
disk would (chosen over a read-only folder, which root ignores, and a tmpfs, which needs mount
rights this machine's test runner does not have). The job must fail with a clear message, the
previous checkpoints must stay complete, no partial file may be visible, and the run must resume
from the last complete checkpoint once the disk has room again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fault_workers import FAULT_ENV, faulty_worker
from reliability_helpers import FINAL, LiveServer, live_server, partial_files, record_figure, wait_for

from lorastudio.api.app import create_app
from lorastudio.settings import Settings
from lorastudio.training.resume.checkpoint import list_checkpoints

STEPS = 6


@pytest.fixture
def server(settings: Settings, shapes: Path) -> Iterator[LiveServer]:
    with live_server(create_app(settings, worker_target=faulty_worker)) as live:
        yield live


def _finished(server: LiveServer, job_id: str, timeout: float = 120) -> dict:
    service = server.app.state.service
    return wait_for(
        lambda: (s := service.job(job_id))["status"] in FINAL and s, timeout, "the job's end", 0.02
    )


def _run(server: LiveServer, config: dict) -> dict:
    started = server.client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    return _finished(server, started.json()["id"])


@pytest.mark.parametrize("fault", ["enospc_checkpoint:3", "enospc_lora"])
def test_a_full_disk_fails_clearly_and_keeps_the_last_checkpoint(
    fault: str,
    server: LiveServer,
    settings: Settings,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(FAULT_ENV, fault)
    config = flux_config(output_name="full", steps=STEPS, save_every=1, keep_last=10)
    job = _run(server, config)
    run_dir = settings.outputs_dir / "full"

    assert job["status"] == "failed"
    assert "no space left on device" in job["error"].lower(), job[
        "error"
    ]  # the OSError or NoSpaceLeft (fix 651)
    kept = [p.name for p in list_checkpoints(run_dir)]
    expected = (
        ["step-000001", "step-000002"]
        if fault.startswith("enospc_checkpoint")
        else [f"step-{s:06d}" for s in range(1, STEPS)]
    )
    assert kept == expected
    assert partial_files(run_dir) == []
    assert not list(run_dir.glob("*.safetensors")) and not list(run_dir.glob("*.json"))
    assert not [p for p in run_dir.rglob(".*")], "staging leftovers of the failed write remain"
    record = server.client.get(f"/api/runs/{job['id']}").json()
    assert record["status"] == "failed" and record["resume_step"] == len(expected)
    record_figure(
        f"disk_full_{fault.split(':')[0]}_failure",
        {"fault": fault, "error": job["error"], "checkpoints_kept": kept},
    )

    if fault == "enospc_lora":  # resuming after a full disk is shown once (checkpoint case)
        return
    monkeypatch.delenv(FAULT_ENV)  # the disk has room again
    resumed = server.client.post(f"/api/runs/{job['id']}/resume", json={})
    assert resumed.status_code == 201, resumed.text
    done = _finished(server, resumed.json()["id"])
    assert done["status"] == "completed" and done["steps_run"] == STEPS
    assert Path(done["lora_path"]).is_file() and partial_files(run_dir) == []
    record_figure(
        "disk_full_enospc_checkpoint",
        {"fault": fault, "error": job["error"], "checkpoints_kept": kept, "resumed_to": done["steps_run"]},
    )
