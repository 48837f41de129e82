"""/api/models: the base-model catalogue, fetching from the hub (background tasks with progress
in GET /api/models/fetch/{id} and the event stream GET /api/models/events), adding folders, and
deleting what lorastudio downloaded or created.

Status codes: a hub repo the token cannot read (gated, private) is 403 (the hub's own 401/403 is
in the message: a 401 here would mean lorastudio's API token); deleting a model lorastudio did not
create is 403; deleting one a job, a generation or a fetch uses is 409.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from lorastudio.api.contract import EVENT_STREAM
from lorastudio.api.deps import service_dep, settings_dep
from lorastudio.api.errors import error_body
from lorastudio.api.schemas_models import (
    AddFolderBody,
    CatalogueModelOut,
    FetchBody,
    FetchList,
    FetchOut,
    FolderForgotten,
    ModelDeleted,
)
from lorastudio.api.sse import event_stream
from lorastudio.basemodels import (
    FetchManager,
    add_folder,
    delete_model,
    forget_folder,
    get_model,
    hub_offline,
    list_models,
)
from lorastudio.basemodels.added import added_id
from lorastudio.errors import LorastudioError, ModelAccessDenied, ModelNotDeletable
from lorastudio.jobs.records import LIVE_STATUSES
from lorastudio.jobs.service import JobService
from lorastudio.settings import Settings

router = APIRouter(prefix="/api/models", tags=["models"])

_manager_lock = threading.Lock()


def fetches_dep(request: Request) -> FetchManager:
    """The app's FetchManager (created on first use, kept on app.state.fetches)."""
    with _manager_lock:
        manager = getattr(request.app.state, "fetches", None)
        if manager is None:
            manager = FetchManager(request.app.state.settings)
            request.app.state.fetches = manager
        return manager


def _forbidden(err: LorastudioError) -> JSONResponse:
    body = error_body(err)
    if isinstance(err, ModelAccessDenied):
        body["hub_status"] = err.status
    return JSONResponse(body, status_code=403)


def _models_in_use(service: JobService) -> set[Path]:
    """Base-model folders (and a single file's base config folders) of the active and queued
    training jobs."""
    status = service.status()
    configs = []
    job = status["job"]
    if job and job["status"] in {s.value for s in LIVE_STATUSES}:
        configs.append(job["config"])
    for queued in status["queue"]:
        configs.append(service.job(queued["id"])["config"])
    paths = [c["base_model"] for c in configs] + [c["base_config"] for c in configs if c.get("base_config")]
    return {Path(p) for p in paths if Path(p).is_absolute()}


@router.get("", response_model=list[CatalogueModelOut])
def catalogue(settings: Settings = Depends(settings_dep)) -> list[dict[str, Any]]:
    """Every base model on disk (models/, added folders, the hub cache), recognised and vetted:
    family, trainable (and why not), size, completeness, whether lorastudio may delete it."""
    return [entry.public() for entry in list_models(settings)]


@router.get("/fetch", response_model=FetchList)
def fetch_list(fetches: FetchManager = Depends(fetches_dep)) -> dict[str, Any]:
    """The fetches of this server's life, oldest first (every running one, the latest 100 ended),
    and whether the hub client is offline."""
    return {"fetches": fetches.list(), "offline": hub_offline()}


@router.post(
    "/fetch",
    status_code=202,
    response_model=FetchOut,
    responses={
        403: {"description": "the hub refused: a gated or private repo without access (ModelAccessDenied)"}
    },
)
def fetch_start(body: FetchBody, fetches: FetchManager = Depends(fetches_dep)) -> Any:
    """Check the repo (access, pipeline, family, files) and start downloading what training
    needs in the background: 202 with the fetch. 400 bad id / untrainable / offline and not on
    disk, 403 gated or private without access, 404 no such repo or revision, 409 being fetched."""
    try:
        token = body.token.get_secret_value() if body.token is not None else None
        return fetches.start(body.repo_id, body.revision, token=token)
    except ModelAccessDenied as err:
        return _forbidden(err)


@router.get("/fetch/{fetch_id}", response_model=FetchOut)
def fetch_status(fetch_id: str, fetches: FetchManager = Depends(fetches_dep)) -> dict[str, Any]:
    """One fetch: status, files and bytes done, the model id once completed, the error."""
    return fetches.get(fetch_id)


@router.post("/fetch/{fetch_id}/cancel", response_model=FetchOut)
def fetch_cancel(fetch_id: str, fetches: FetchManager = Depends(fetches_dep)) -> dict[str, Any]:
    """Stop a running fetch (files done are kept; fetching again resumes). 404 when not running."""
    return fetches.cancel(fetch_id)


@router.get("/events", response_class=StreamingResponse, responses=EVENT_STREAM)
async def events(
    request: Request,
    after: int | None = Query(default=None, ge=0, description="resume after this event id"),
    last_event_id: str | None = Header(default=None),
    fetches: FetchManager = Depends(fetches_dep),
) -> Response:
    """Server-sent events of every fetch (fetch_started, fetch_progress, fetch_complete,
    fetch_error, fetch_cancelled) as `id:`, `event:`, `data:`, after a first `id: <start>`
    without data (the stream's position: no event; an EventSource's Last-Event-ID). Without
    `after` (or Last-Event-ID) the stream starts with new events only. A resume from an id whose
    next events the server no longer keeps gets `event: gap` ({after, next}) first (api/sse.py)."""
    return event_stream(request, fetches, after, last_event_id)


@contextlib.contextmanager
def _nothing_starts(service: JobService, request: Request) -> Iterator[None]:
    """No training job is queued and no generation takes a base model while the block runs (a
    model delete's check and move: RELIABILITY 772)."""
    with service.enqueues_held(), request.app.state.generation.bases_held():
        yield


@router.post("/added", status_code=201, response_model=CatalogueModelOut)
def add(body: AddFolderBody, settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """List an existing folder (absolute path) in the catalogue; lorastudio never writes to or
    deletes it. Returns its entry (trainable or not, with the reason). 400 for a bad path."""
    folder = add_folder(settings, body.path)
    return get_model(settings, added_id(folder)).public()


@router.delete("/added/{model_id}", response_model=FolderForgotten)
def forget(model_id: str, settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """Remove an added folder from the catalogue (its files are left alone). 404 when unknown."""
    return {"forgotten": model_id, "path": str(forget_folder(settings, model_id))}


@router.get("/{model_id}", response_model=CatalogueModelOut)
def model(model_id: str, settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """One catalogue entry. 404 when unknown."""
    return get_model(settings, model_id).public()


@router.delete(
    "/{model_id}",
    response_model=ModelDeleted,
    responses={403: {"description": "not a model lorastudio downloaded or created (ModelNotDeletable)"}},
)
def delete(
    model_id: str,
    request: Request,
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
    fetches: FetchManager = Depends(fetches_dep),
) -> Any:
    """Delete a model lorastudio downloaded or created (fetched or tiny). 403 for anything else
    (the user's folders, added folders, the hub cache), 409 while a job, a caption job, a
    generation request or a fetch uses it, 404 when unknown."""
    captions = getattr(request.app.state, "captions", None)  # created on first use (routes/captions.py)

    def in_use() -> set[Path]:  # asked while nothing can start on a model (_nothing_starts)
        used = _models_in_use(service) | fetches.busy_folders() | request.app.state.generation.models_in_use()
        return used | (captions.models_in_use() if captions is not None else set())

    try:
        entry = delete_model(settings, model_id, in_use=in_use, hold=_nothing_starts(service, request))
    except ModelNotDeletable as err:
        return _forbidden(err)
    return {"deleted": entry.id, "path": entry.path}
