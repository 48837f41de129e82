"""What a run reads deleted or renamed while the run starts: a base model (DELETE /api/models/{id},
RELIABILITY 772) or its dataset (a rename or a delete, RELIABILITY 774). The start is refused
(400 naming the field and what happened) or the other request is (409, in use), never a run
queued on a folder gone from under it (it failed at its worker's start). The interleavings are
forced: the change lands after the start's checks, before its queueing; and a model delete's
check and move happen while no job can be queued and no generation can take a base model (the
job service's lock and the generation service's held). A generation whose base model is deleted
after its checks is refused naming the delete (not diffusers' "neither a valid local path")."""

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
from lorastudio.jobs.generation import GenerationService
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
    state = client.app.state  # type: ignore[attr-defined]
    free_at_move: list[bool] = []
    rename = os.rename

    def watched(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(src) == model:  # the delete moves the folder aside: may a job queue, a generation start?
            for lock in (state.service._cond, state.generation._bases_lock):
                probe = threading.Thread(target=lambda lock=lock: free_at_move.append(_try_lock(lock)))
                probe.start()
                probe.join()
        rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(catalogue.os, "rename", watched)

    assert client.delete("/api/models/tiny-flux").status_code == 200
    assert free_at_move == [False, False] and not model.exists()


def test_a_model_deleted_after_a_generations_checks_refuses_it_naming_the_delete(
    client: TestClient, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[Any] = []
    check = GenerationService.check  # then the request takes its base model

    def delete_meanwhile(self: GenerationService, req: Any) -> Any:
        checked = check(self, req)
        deleted.append(client.delete("/api/models/tiny-flux"))
        return checked

    monkeypatch.setattr(GenerationService, "check", delete_meanwhile)
    body = {"family": "flux", "base_model": "tiny-flux", "prompt": "x", "steps": 1, "width": 32, "height": 32}

    answer = client.post("/api/generate", json=body)

    assert deleted[0].status_code == 200, deleted[0].text
    assert answer.status_code == 400, answer.text
    assert answer.json() == {
        "error": "ModelSourceError",
        "detail": f"{model} is gone: the model was deleted as this generation started",
    }


def _try_lock(lock: Any) -> bool:
    """Whether this thread could take `lock` (a Condition's, an RLock) now (released at once)."""
    if lock.acquire(blocking=False):
        lock.release()
        return True
    return False
