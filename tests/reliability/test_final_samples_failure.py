"""A failure in the final sample round, after the run's LoRA was written, in the real worker
subprocess (fault_workers "final_samples"): the run completes (its LoRA is whole) with the failure
recorded as a warning, and every surface says the same: the job's status and record, the run
store (`/api/runs`), the event stream (a `warning` event, then `complete`, no `error`), the run's
outputs. Was: the run ended "failed" with its LoRA on disk."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fault_workers import FAULT_ENV, faulty_worker
from reliability_helpers import FINAL, LiveServer, live_server, wait_for

from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.fixture
def server(settings: Settings, shapes: Path) -> Iterator[LiveServer]:
    with live_server(create_app(settings, worker_target=faulty_worker)) as live:
        yield live


def test_a_failed_final_sample_round_completes_the_run_with_a_warning(
    server: LiveServer,
    settings: Settings,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(FAULT_ENV, "final_samples")
    config = flux_config(output_name="warned", steps=2, sample_prompts=["a red circle"], sample_steps=2)
    started = server.client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    service = server.app.state.service
    job = wait_for(lambda: (s := service.job(job_id))["status"] in FINAL and s, 120, "the job's end", 0.02)

    assert job["status"] == "completed" and job["error"] is None
    [warning] = job["warnings"]
    assert "final sample round (step 2) failed" in warning and "the final sampler broke" in warning
    lora = settings.outputs_dir / "warned" / "warned.safetensors"
    assert job["lora_path"] == str(lora) and lora.is_file()

    status = server.client.get("/api/train/status").json()["job"]
    assert (status["status"], status["warnings"]) == ("completed", [warning])
    record = server.client.get(f"/api/runs/{job_id}").json()
    assert (record["status"], record["error"], record["warnings"]) == ("completed", None, [warning])
    assert record["lora_file"] is True and {o["kind"] for o in record["outputs"]} >= {"lora", "sidecar"}
    [listed] = [r for r in server.client.get("/api/runs").json()["runs"] if r["id"] == job_id]
    assert listed["warnings"] == [warning]

    with server.client.stream("GET", "/api/train/events", params={"after": 0}, timeout=10) as stream:
        kinds = []
        for line in stream.iter_lines():
            if line.startswith("data:"):
                data = json.loads(line[5:])
                kinds.append(data["type"])
                if data["type"] == "status" and data["status"] == "completed":
                    break
    assert "warning" in kinds and "error" not in kinds
    assert kinds.index("warning") < kinds.index("complete")
