"""A run record whose output folder another record shares (a Resume records a new run in the same
folder) is deleted without its files, which go with the last record holding them; the Runs
pages asked "Delete run NAME and its files?" all the same (session 36 journey). GET /api/runs and
GET /api/runs/{id} now say which other records share the folder (`shared_with`), so the web words
the question for what will be done (session 37 kpfix6)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from lorastudio.jobs.records import JobStatus
from lorastudio.settings import Settings


def test_shared_with_names_the_records_of_one_folder(client: TestClient, settings: Settings) -> None:
    store = client.app.state.store  # type: ignore[attr-defined]
    for run_id, name in (("first", "cat"), ("other", "dog"), ("resumed", "cat")):
        store.create_run(run_id, name, "flux", {"family": "flux", "base_model": "b", "steps": 1}, "2026-12-01T00:00:00+00:00",
                         status=JobStatus.COMPLETED)  # fmt: skip
    (settings.outputs_dir / "cat").mkdir(parents=True)
    listed = {r["id"]: r["shared_with"] for r in client.get("/api/runs").json()["runs"]}
    assert listed == {"first": ["resumed"], "other": [], "resumed": ["first"]}
    assert client.get("/api/runs/first").json()["shared_with"] == ["resumed"]

    assert client.delete("/api/runs/first").json() == {"deleted": "first", "files_removed": False}
    assert (settings.outputs_dir / "cat").is_dir()  # as shared_with said: the record only
    assert client.get("/api/runs/resumed").json()["shared_with"] == []
    assert client.delete("/api/runs/resumed").json() == {"deleted": "resumed", "files_removed": True}
