"""/api/train: start (or queue), preflight, stop, status, and the live event stream (SSE)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from lorastudio.api.contract import EVENT_STREAM
from lorastudio.api.deps import service_dep
from lorastudio.api.host_wait import HOST_KNOWN
from lorastudio.api.schemas import PreflightBody, StartBody, StopBody
from lorastudio.api.schemas_preflight import PreflightOut
from lorastudio.api.schemas_runs import JobOut, StatusOut
from lorastudio.api.sse import event_stream
from lorastudio.jobs.service import JobService

router = APIRouter(prefix="/api/train", tags=["train"])


@router.post("/start", status_code=201, response_model=JobOut, dependencies=HOST_KNOWN)
def start(body: StartBody, service: JobService = Depends(service_dep)) -> dict[str, Any]:
    """Validate and start (or queue) a training job. 201 with the job; 400 listing every
    problem; 409 when busy and `queue` is false."""
    return service.submit(body.config, queue=body.queue)


@router.post("/preflight", response_model=PreflightOut, dependencies=HOST_KNOWN)
def preflight(body: PreflightBody, service: JobService = Depends(service_dep)) -> dict[str, Any]:
    """The same validation as start, no side effects, plus a report (dataset, schedule,
    precision plan, rough memory estimate)."""
    return service.preflight(body.config)


@router.post("/stop", response_model=JobOut)
def stop(body: StopBody, service: JobService = Depends(service_dep)) -> dict[str, Any]:
    """Stop the running job (save or discard), or cancel a queued one. 404 when none, 409 when
    a stop asking the other way (another tab or client) is pending."""
    return service.stop(body.save, job_id=body.job_id)


@router.get("/status", response_model=StatusOut)
def status(
    since: int | None = Query(
        default=None, ge=0, description="only metric points after this step and validation rounds from it on"
    ),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """The active (else the latest) job's snapshot, the queue, and whether the GPU is busy."""
    return service.status(since=since)


@router.get("/events", response_class=StreamingResponse, responses=EVENT_STREAM)
async def events(
    request: Request,
    after: int | None = Query(default=None, ge=0, description="resume after this event id"),
    last_event_id: str | None = Header(default=None),
    service: JobService = Depends(service_dep),
) -> Response:
    """Server-sent events: every event the job service ingests (engine events and status
    changes), as `id: <seq>`, `event: <type>`, `data: <json>`, after a first `id: <start>`
    without data (the stream's position: no event; an EventSource's Last-Event-ID). Without
    `after` (or Last-Event-ID) the stream starts with new events only. A resume from an id whose
    next events the server no longer keeps gets `event: gap` ({after, next}) first (api/sse.py)."""
    return event_stream(request, service, after, last_event_id)
