"""/api/generations: the asynchronous form of POST /api/generate, for a generation that outlives
a proxy's read timeout (jobs/generation_jobs.py says why and how it is bounded).

POST answers 202 at once with the request's status (its `request_id`: the client's, or one the
server names); GET /api/generations/{request_id} reads it (queued, loading, generating step i of
n, saving, then done with the gallery image, failed with the error and the status the
synchronous form would have answered, or cancelled; interrupted when the server stopped before
it ended: jobs/generation_records.py keeps the statuses past a restart); POST .../cancel stops it. Nothing here is
cancelled by a client leaving. The routes only route: the service's registry does the work."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Path
from pydantic import ValidationError

from lorastudio.api.deps import generation_dep
from lorastudio.api.errors import error_body, status_code_of, status_code_of_class
from lorastudio.api.routes.generate import _reference_urls, client_request_id, request_of
from lorastudio.api.schemas import REQUEST_ID_PATTERN, ErrorOut, GenerateBody
from lorastudio.api.schemas_files import GenerateCancelOut
from lorastudio.api.schemas_generation import GenerationStatusOut
from lorastudio.errors import NotFound
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_records import RecordedError, records_dir

router = APIRouter(tags=["generate"])


@router.post(
    "/api/generations",
    status_code=202,
    response_model=GenerationStatusOut,
    responses={503: {"model": ErrorOut, "description": "the server is stopping: send it again"}},
)
def start_generation(
    body: GenerateBody, service: GenerationService = Depends(generation_dep)
) -> dict[str, Any]:
    """Send one generation and answer at once: 202 with its status (queued); GET
    /api/generations/{request_id} follows it to its image. Checked before the answer, as POST
    /api/generate checks it: 400 for a request over the budget or a bad LoRA file, 404 for an
    unknown LoRA, 409 while training runs, when its request_id is in flight, kept here or ended
    less than 10 minutes ago, or when MAX_IN_FLIGHT (8) generations are in flight (both forms
    count), 503 when the server is stopping. `request_id` null: the server names it (the
    answer's). A client that goes away after the 202 cancels nothing: the generation goes on."""
    request_id = client_request_id(body) or f"gen-{uuid.uuid4().hex}"
    return _status_out(service.jobs.submit(request_of(body), request_id))


@router.get("/api/generations/{request_id}", response_model=GenerationStatusOut)
def generation_status(
    request_id: str = Path(pattern=REQUEST_ID_PATTERN),
    service: GenerationService = Depends(generation_dep),
) -> dict[str, Any]:
    """The state of a generation sent to POST /api/generations: in flight (its phase, its
    denoising step of steps), or how it ended (done: `image`; failed or cancelled: `error`).
    Read from its record in the home once the server forgot it (ended more than an hour ago, or
    sent before a restart): done, failed or cancelled as it ended, or interrupted (`error`: the
    server stopped before it ended; nothing kept). 404 for an id never sent there, or whose
    record was removed (the newest 200 are kept), or whose record is not one this server answers."""
    status = _status_out(service.jobs.status(request_id))
    try:  # a record written by hand or by another version: its fields not the answer's (RELIABILITY 1160)
        GenerationStatusOut.model_validate(status)
    except ValidationError as err:
        record = records_dir(service.settings.home) / f"{request_id}.json"
        raise NotFound(
            f"no generation {request_id!r} readable here: its record {record} does not hold a status "
            f"({err.error_count()} fields wrong, e.g. {'.'.join(map(str, err.errors()[0]['loc']))})"
        ) from None
    return status


@router.post("/api/generations/{request_id}/cancel", response_model=GenerateCancelOut)
def cancel_generation(
    request_id: str = Path(pattern=REQUEST_ID_PATTERN),
    service: GenerationService = Depends(generation_dep),
) -> dict[str, Any]:
    """Cancel a generation sent to POST /api/generations: one waiting for the worker ends now, a
    running one after its current denoising step (loading: before its next component or LoRA);
    its state becomes cancelled and nothing of it is kept. A second cancel answers the same
    while it stops. 404 when no such generation is in flight (unknown, or it ended: its state
    says how)."""
    return {"request_id": request_id, "was": service.jobs.cancel(request_id)}


def _status_out(status: dict[str, Any]) -> dict[str, Any]:
    """The registry's status as GenerationStatusOut: the image with its URLs, the error as the
    synchronous form's body and status."""
    result, error = status.pop("result"), status.pop("error")
    image = None
    if result is not None:
        image = {**result, "url": f"/gallery/{result['file']}", "reference_urls": _reference_urls(result)}
    if isinstance(error, RecordedError):  # read from its record (a restart since, or forgotten here)
        failure = {
            "error": error.kind, "detail": str(error), "problems": error.problems or None,
            "status": status_code_of_class(error.error_class()),
        }  # fmt: skip
    else:
        failure = None if error is None else {**error_body(error), "status": status_code_of(error)}
    return {**status, "image": image, "error": failure}
