"""Caption jobs: start one for a dataset, its status, cancel, the event stream.

POST /api/datasets/{name}/caption (202) starts one (jobs/captioning.py: 409 while another runs,
while training uses the dataset, or holds every GPU and the captioning model does not fit beside
it: the message names needed vs free GiB, jobs/caption_gpu.py; a run on a dataset being captioned
is refused likewise); GET the same path gives the dataset's
newest job; GET /api/captions lists the recent ones. Jobs are recorded in the studio home
(jobs/caption_records.py) and answered after a restart. The job's events (caption_job, caption_started, caption_progress, caption_failed, caption_kept,
caption_summary, caption_error, caption_end) stream at /api/captions/events.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from lorastudio.api.contract import EVENT_STREAM
from lorastudio.api.dataset_lookup import dataset_dep
from lorastudio.api.host_wait import HOST_KNOWN
from lorastudio.api.schemas_caption import CaptionJobOut
from lorastudio.api.sse import event_stream
from lorastudio.captioning.options import CaptionOptions
from lorastudio.jobs.captioning import CaptionJobs

router = APIRouter(tags=["captions"])
_lock = threading.Lock()


def captions_dep(request: Request) -> CaptionJobs:
    """The app's CaptionJobs (created on first use with the app's arbiter, kept on app.state)."""
    with _lock:
        jobs = getattr(request.app.state, "captions", None)
        if jobs is None:
            state = request.app.state
            jobs = CaptionJobs(
                state.settings,
                state.arbiter,
                state.service.datasets_in_use,
                training_memory=state.service.training_memory,
            )
            state.service.watch_captioning(jobs.busy_jobs)  # runs on a dataset being captioned: 409
            state.captions = jobs
        return jobs


@router.post(
    "/api/datasets/{name}/caption", status_code=202, response_model=CaptionJobOut, dependencies=HOST_KNOWN
)
def start(
    name: str,
    body: CaptionOptions,
    dataset: Path = Depends(dataset_dep),
    jobs: CaptionJobs = Depends(captions_dep),
) -> dict[str, Any]:
    """Caption the images of dataset `name` that have no caption (all with `overwrite`) with a
    vision-language model (catalogue id, hub id or model folder), in a worker. 400 bad model /
    device / a catalogue captioner not fetched, 404 no such dataset, 409 a caption job runs,
    training uses the dataset, or holds the GPU and the model does not fit beside it (or its
    memory is not known)."""
    return jobs.start(name, body)


@router.get("/api/datasets/{name}/caption", response_model=CaptionJobOut)
def latest(
    name: str, dataset: Path = Depends(dataset_dep), jobs: CaptionJobs = Depends(captions_dep)
) -> dict[str, Any]:
    """The dataset's newest caption job (of the recent ones, recorded across restarts; 404: none,
    or no such dataset)."""
    return jobs.latest(name)


@router.get("/api/captions", response_model=list[CaptionJobOut])
def recent(jobs: CaptionJobs = Depends(captions_dep)) -> list[dict[str, Any]]:
    """The recent caption jobs, newest first: this server's and those recorded before it (an
    earlier server's, a CLI caption's; the newest 50 are kept). One left running by a server or
    CLI that died reads "interrupted", with what it had done."""
    return jobs.recent()


@router.get("/api/captions/events", response_class=StreamingResponse, responses=EVENT_STREAM)
async def events(
    request: Request,
    after: int | None = Query(default=None, ge=0, description="resume after this event id"),
    last_event_id: str | None = Header(default=None),
    jobs: CaptionJobs = Depends(captions_dep),
) -> Response:
    """Server-sent events of every caption job, as `id:`, `event:`, `data:`, after a first
    `id: <start>` without data (the stream's position: no event; an EventSource's Last-Event-ID).
    Without `after` (or Last-Event-ID) the stream starts with new events only. A resume from an
    id whose next events the server no longer keeps gets `event: gap` ({after, next}) first
    (api/sse.py)."""
    return event_stream(request, jobs, after, last_event_id)


@router.get("/api/captions/{job_id}", response_model=CaptionJobOut)
def status(job_id: str, jobs: CaptionJobs = Depends(captions_dep)) -> dict[str, Any]:
    """One caption job: progress, failures by file, the first captions (after a restart, from
    its record: "interrupted" when the server died while it ran). 404: unknown or pruned."""
    return jobs.get(job_id)


@router.post("/api/captions/{job_id}/cancel", response_model=CaptionJobOut)
def cancel(job_id: str, jobs: CaptionJobs = Depends(captions_dep)) -> dict[str, Any]:
    """Stop a running caption job after its current image (captions written are kept)."""
    return jobs.cancel(job_id)
