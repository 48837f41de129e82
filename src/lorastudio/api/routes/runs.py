"""/api/runs: the run store (every run, this server's life and before)."""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Query

from lorastudio.api.deps import service_dep, settings_dep, store_dep
from lorastudio.api.schemas import RunDeleted, RunDetail, RunList
from lorastudio.errors import JobActive
from lorastudio.jobs.records import LIVE_STATUSES
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

router = APIRouter(prefix="/api/runs", tags=["runs"])


@router.get("", response_model=RunList)
def list_runs(limit: int = Query(default=200, ge=1, le=10_000), store: RunStore = Depends(store_dep)) -> dict:
    """Runs, newest first (no configs or metrics)."""
    return {"runs": store.list_runs(limit)}


@router.get("/{run_id}", response_model=RunDetail)
def get_run(run_id: str, store: RunStore = Depends(store_dep)) -> dict[str, Any]:
    """One run: config, metric points (decimated), outputs, error. 404 when unknown."""
    return store.get_run(run_id)


@router.delete("/{run_id}", response_model=RunDeleted)
def delete_run(
    run_id: str,
    keep_files: bool = Query(default=False, description="keep the run's output folder"),
    store: RunStore = Depends(store_dep),
    service: JobService = Depends(service_dep),
    settings: Settings = Depends(settings_dep),
) -> dict[str, Any]:
    """Delete a finished run's record and (unless keep_files, or another run shares it) its
    output folder. 409 while the run is live, 404 when unknown."""
    run = store.get_run(run_id, max_points=2)
    if run["status"] in {s.value for s in LIVE_STATUSES}:
        raise JobActive(f"run {run_id} is {run['status']}; stop it first")
    name = run["output_name"]
    shared = [r for r in store.runs_with_output_name(name) if r != run_id]
    store.delete_run(run_id)
    removed = False
    if not keep_files and not shared and name:
        removed = _remove_output_dir(settings, name)
    return {"deleted": run_id, "files_removed": removed}


def _remove_output_dir(settings: Settings, name: str) -> bool:
    """Move outputs/<name> aside (one rename), then delete it. Only a real folder directly
    inside the outputs root is removed; a symlink is only unlinked."""
    root = settings.outputs_dir
    folder = root / name
    if folder.parent != root or not os.path.lexists(folder):
        return False
    if folder.is_symlink():
        folder.unlink()
        return True
    trash = root / f".deleting-{uuid.uuid4().hex}"
    os.rename(folder, trash)
    shutil.rmtree(trash)
    return True
