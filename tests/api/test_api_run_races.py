"""A run's delete racing its extension (train longer: POST /api/runs/{id}/resume with more steps)
from two clients, on a real server with real workers (tiny FLUX.1): whichever the server takes
first wins whole. A delete that lands while the extension is being checked removes the run, and
the extension is then refused (404) instead of queueing a job whose checkpoint is gone; an
extension queued first keeps the folder, which its job trains on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from api_helpers import FINAL, LiveServer, upload_folder, wait_idle, wait_status

import lorastudio.jobs.service as service_module


def _completed_run(server: LiveServer, config: dict) -> dict:
    client = server.client
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job = wait_status(client, started.json()["id"], FINAL)
    assert job["status"] == "completed", job
    wait_idle(client)
    return job


def test_a_delete_while_an_extension_is_checked_wins_whole(
    server: LiveServer,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    job = _completed_run(server, flux_config(output_name="race", steps=4, save_every=2))
    run_dir = Path(client.get("/api/info").json()["outputs_root"]) / "race"
    assert (run_dir / "checkpoints").is_dir()

    checked = service_module.validate_resume
    deletes: list[httpx.Response] = []

    def check_then_delete(*args: object, **kwargs: object) -> object:
        """The extension's checks pass; the other client's delete lands before it is queued."""
        resume = checked(*args, **kwargs)
        with httpx.Client(base_url=server.url, timeout=30) as other:
            deletes.append(other.delete(f"/api/runs/{job['id']}"))
        return resume

    monkeypatch.setattr(service_module, "validate_resume", check_then_delete)
    extended = client.post(f"/api/runs/{job['id']}/resume", json={"settings": {"steps": 8}})
    monkeypatch.setattr(service_module, "validate_resume", checked)

    assert [d.status_code for d in deletes] == [200] and deletes[0].json()["files_removed"], deletes[0].text
    assert extended.status_code == 404, extended.text
    assert "race" in extended.json()["detail"]
    assert not run_dir.exists()
    status = client.get("/api/train/status").json()
    assert status["queue"] == [] and not status["busy"], status
    assert client.get("/api/runs").json()["runs"] == []  # no record of a job that could not run


@pytest.mark.slow  # two real runs; the delete's lock is in the default suite's test above
def test_an_extension_queued_first_keeps_the_folder_a_delete_of_the_old_record_leaves(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    job = _completed_run(server, flux_config(output_name="race", steps=4, save_every=2))
    extended = client.post(f"/api/runs/{job['id']}/resume", json={"settings": {"steps": 8}})
    assert extended.status_code == 201, extended.text
    deleted = client.delete(f"/api/runs/{job['id']}")
    assert deleted.status_code == 200 and deleted.json()["files_removed"] is False, deleted.text
    done = wait_status(client, extended.json()["id"], FINAL)
    assert done["status"] == "completed" and done["steps_run"] == 8, done
    assert Path(done["lora_path"]).is_file()
