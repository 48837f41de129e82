"""A run started through the API on a server with a standby training worker (jobs/standby.py):
the job is handed the waiting process (its pid is the job's), a stop with save works on it as on
a fresh worker, and a new standby is spawned after. (Same final loss as a fresh process, a
standby killed while waiting, a changed environment: tests/unit/jobs/test_jobs_standby.py; no
orphan: tests/reliability/test_standby_worker.py.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from api_helpers import FINAL, LiveServer, live_server, upload_folder, wait_idle, wait_status
from tests.polling import until

from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.fixture
def standby_server(settings: Settings) -> Iterator[LiveServer]:
    with live_server(create_app(settings.model_copy(update={"standby_worker": True}))) as live:
        yield live


def test_a_run_is_handed_the_standby_and_stops_with_save(
    standby_server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = standby_server.client
    keeper = standby_server.app.state.service._standby
    assert keeper is not None
    waiting = until(lambda: keeper.current_pid, 30, "standby worker")
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post(
        "/api/train/start", json={"config": flux_config(output_name="handed", steps=100_000)}
    )
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    running = wait_status(client, job_id, {"running"})
    assert standby_server.app.state.service.job(job_id)["pid"] == waiting
    assert client.post("/api/train/stop", json={"save": True}).status_code == 200
    job = wait_status(client, job_id, FINAL)
    assert job["status"] == "stopped" and job["steps_run"] >= running["steps_run"] >= 1
    assert job["lora_path"] and Path(job["lora_path"]).is_file()
    wait_idle(client)
    after = until(lambda: keeper.current_pid, 30, "next standby worker")
    assert after != waiting
