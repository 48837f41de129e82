"""What a run reads deleted or renamed while the run starts: a base model (DELETE /api/models/{id},
RELIABILITY 772) or its dataset (a rename or a delete, RELIABILITY 774). The start is refused
(400 naming the field and what happened) or the other request is (409, in use), never a run
queued on a folder gone from under it (it failed at its worker's start). The interleavings are
forced: the change lands after the start's checks, before its queueing; and a model delete's
check and move happen while no job can be queued (the job service's lock held)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lorastudio.basemodels import catalogue
from lorastudio.jobs import service as service_module
from lorastudio.settings import Settings


@pytest.fixture
def model(settings: Settings, tiny_model: Callable[[str], Path], sample_dataset: Path) -> Path:
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    return Path(shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux"))


def test_a_model_deleted_after_a_starts_checks_refuses_the_start(
    client: TestClient, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[Any] = []
    planned = service_module.planned_gpu_gib  # called between the start's checks and its queueing

    def delete_meanwhile(*args: Any, **kwargs: Any) -> Any:
        deleted.append(client.delete("/api/models/tiny-flux"))
        return planned(*args, **kwargs)

    monkeypatch.setattr(service_module, "planned_gpu_gib", delete_meanwhile)
    config = {"family": "flux", "base_model": "tiny-flux", "data_dir": "shapes", "resolution": 32, "steps": 2}

    start = client.post("/api/train/start", json={"config": config})

    assert deleted[0].status_code == 200, deleted[0].text
    assert start.status_code == 400, start.text
    problem = start.json()["problems"][0]
    assert problem["field"] == "base_model"
    assert f"{model} is gone: the model was deleted after the run's checks" in problem["message"]
    assert client.get("/api/runs").json()["runs"] == []
    assert client.get("/api/train/status").json()["busy"] is False


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda client: client.post("/api/datasets/shapes/rename", json={"to": "shapes2"}), "renamed"),
        (lambda client: client.delete("/api/datasets/shapes"), "deleted"),
    ],
    ids=["renamed", "deleted"],
)
def test_a_dataset_changed_after_a_starts_checks_refuses_the_start(
    client: TestClient,
    settings: Settings,
    model: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[TestClient], Any],
    words: str,
) -> None:
    changed: list[Any] = []
    planned = service_module.planned_gpu_gib  # called between the start's checks and its queueing

    def change_meanwhile(*args: Any, **kwargs: Any) -> Any:
        changed.append(change(client))
        return planned(*args, **kwargs)

    monkeypatch.setattr(service_module, "planned_gpu_gib", change_meanwhile)
    config = {"family": "flux", "base_model": "tiny-flux", "data_dir": "shapes", "resolution": 32, "steps": 2}

    start = client.post("/api/train/start", json={"config": config})

    assert changed[0].status_code == 200, changed[0].text
    assert start.status_code == 400, start.text
    problem = start.json()["problems"][0]
    folder = settings.datasets_dir.resolve() / "shapes"
    assert problem == {
        "field": "data_dir",
        "message": f"dataset folder {folder} is gone: it was renamed or deleted after the run's checks",
    }
    assert client.get("/api/runs").json()["runs"] == []
    assert client.get("/api/train/status").json()["busy"] is False
    claims = settings.home / "claims"  # the start's read claim released with its refusal
    assert not claims.is_dir() or not list(claims.glob("*.holder"))


def test_a_model_delete_decides_and_moves_while_no_run_can_be_queued(
    client: TestClient, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = client.app.state.service  # type: ignore[attr-defined]
    free_at_move: list[bool] = []
    rename = os.rename

    def watched(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(src) == model:  # the delete moves the folder aside: may another thread queue a job?
            probe = threading.Thread(target=lambda: free_at_move.append(_try_lock(service._cond)))
            probe.start()
            probe.join()
        rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(catalogue.os, "rename", watched)

    assert client.delete("/api/models/tiny-flux").status_code == 200
    assert free_at_move == [False] and not model.exists()


def _try_lock(cond: threading.Condition) -> bool:
    """Whether this thread could take `cond`'s lock now (released at once)."""
    if cond.acquire(blocking=False):
        cond.release()
        return True
    return False
