"""The dataset warnings a run states when it starts (data/scan_warnings.py, the engine's
DatasetWarnings event) reach its record, not only its log (RELIABILITY 847): the job status (the
Live page) and GET /api/runs/{id} (the run page) list them as `dataset_warnings`, the preflight's
`dataset.warnings` words; a store written before them reads []. The worker target:
plan_workers.report_dataset_warnings (the real run's event: tests/unit/training/test_run_scan_warnings.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from api_helpers import FINAL, LiveServer, live_server, read_events, upload_folder, wait_idle, wait_status
from plan_workers import SAID, report_dataset_warnings

from lorastudio.api.app import create_app
from lorastudio.api.schemas_runs import JobOut, RunDetail
from lorastudio.jobs.records import now_iso
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from old_store import first_version_store


@pytest.fixture
def warned_server(settings: Settings) -> Iterator[LiveServer]:
    with live_server(create_app(settings, worker_target=report_dataset_warnings)) as live:
        yield live


def test_a_runs_dataset_warnings_are_kept_in_its_status_and_record(
    warned_server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = warned_server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post("/api/train/start", json={"config": flux_config(output_name="warned")})
    assert started.status_code == 201, started.text
    assert started.json()["dataset_warnings"] == []  # nothing said yet
    job_id = started.json()["id"]
    events = read_events(client, job_id)
    job = wait_status(client, job_id, FINAL)
    wait_idle(client)
    assert [e["warnings"] for e in events if e["type"] == "dataset_warnings"] == [SAID]
    assert JobOut.model_validate(job).dataset_warnings == SAID
    assert job["warnings"] == []  # not RunWarning banners: nothing failed
    detail = client.get(f"/api/runs/{job_id}").json()
    assert RunDetail.model_validate(detail).dataset_warnings == SAID

    store = RunStore.open(warned_server.app.state.store.path, recover=False)  # they outlive the server
    try:
        assert store.get_run(job_id)["dataset_warnings"] == SAID
    finally:
        store.close()


def test_a_store_written_before_dataset_warnings_reads_none(tmp_path: Path) -> None:
    db = first_version_store(tmp_path / "old.db", "r1", "older", now_iso())
    store = RunStore.open(db)
    try:
        assert store.get_run("r1")["dataset_warnings"] == []
        store.set_dataset_warnings("r1", SAID)
        assert store.get_run("r1")["dataset_warnings"] == SAID
    finally:
        store.close()
