"""Worker events -> job state: parse a tagged event from the queue and fold it into a `Job`.

Pure bookkeeping with no lock, store or log of its own: the job service calls `fold_event`
under its lock at its single ingestion point, then records what the returned `Folded` says.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from lorastudio.jobs.busy import BUSY, WorkerBusy
from lorastudio.jobs.records import Job, JobStatus, metric_point, now_iso, sanitize
from lorastudio.training.events import parse_event

log = logging.getLogger("lorastudio.jobs")

TERMINAL_EVENTS = frozenset({"complete", "error"})


@dataclass(frozen=True)
class Folded:
    """What folding one event changed.

    point: a new metric point to store (None: none); total_steps: the run's length as its
    progress now says, to store when it changed (None: unchanged; an epoch run's is known only
    from its events); validation: a validation round's point
    to store (None: none); plan: the plan_chosen event to store in the
    run record (None: none); warning: a warning event's message to add to the record (None:
    none); now_running: the job went from preparing to running; final: the
    (status, error) the job ends with (None: it goes on)."""

    point: dict[str, Any] | None = None
    total_steps: int | None = None
    plan: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None  # a validation round to store: {step, loss}
    warning: str | None = None  # a warning event's message to store
    dataset_warnings: list[str] | None = None  # the run's dataset warnings to store (None: none came)
    now_running: bool = False
    final: tuple[JobStatus, str | None] | None = None


def parse_tagged(item: Any) -> tuple[int, int, dict[str, Any]] | None:
    """(generation, pid, sanitised event dict) from a queue item `(generation, pid, raw event)`;
    None (with a warning in the log) when it is malformed."""
    try:
        generation, pid, raw = item
        if isinstance(raw, dict) and raw.get("type") == BUSY:  # the worker's own message (jobs/busy.py)
            return generation, pid, WorkerBusy.model_validate(raw).model_dump()
        event = parse_event(raw)
    except (ValueError, TypeError, ValidationError) as err:
        log.warning("ignoring a malformed worker event: %s", err)
        return None
    return generation, pid, sanitize(event.model_dump(mode="python"))


def fold_event(job: Job, data: dict[str, Any]) -> Folded:
    """Fold one sanitised event into `job`: phase, progress (and preparing -> running), metric
    history, steps run, latest samples, LoRA path. The final status is returned, not set: the
    caller finishes the job (store, status event, GPU release)."""
    kind = data["type"]
    point = None
    total = None
    now_running = False
    final = None
    if kind in ("model_load_started", "model_load_completed", "preparing"):
        job.phase = data
    elif kind == "progress":
        job.progress = data
        if job.status == JobStatus.PREPARING:
            job.status = JobStatus.RUNNING
            now_running = True
        candidate = metric_point(data)
        if job.history.add(candidate):
            point = candidate
        job.steps_run = max(job.steps_run, data["step"])
        if data["total_steps"] != job.total_steps:
            job.total_steps = total = data["total_steps"]
    elif kind == "plan_chosen":
        job.plan = data
        return Folded(plan=data)
    elif kind == "validation":
        point = {"step": data["step"], "loss": data["loss"]}  # loss None: not finite
        job.validation = [p for p in job.validation if p["step"] != point["step"]] + [point]
        return Folded(validation=point)
    elif kind == "dataset_warnings":
        job.dataset_warnings = list(data["warnings"])
        return Folded(dataset_warnings=job.dataset_warnings)
    elif kind == "warning":
        job.warnings.append(data["message"])
        return Folded(warning=data["message"])
    elif kind == "sample_ready":
        job.samples = {"step": data["step"], "images": data["images"]}
    elif kind == "complete":
        job.lora_path = data["lora_path"]
        job.steps_run = data["steps_run"]
        final = (JobStatus.STOPPED if data["stopped"] else JobStatus.COMPLETED, None)
    elif kind == "error":
        final = (JobStatus.FAILED, data["message"])
    elif kind == BUSY:
        job.busy = (
            None if data["work"] is None else {"work": data["work"], "step": data["step"], "since": now_iso()}
        )
        job.busy_changed_at = time.monotonic()
    return Folded(point=point, total_steps=total, now_running=now_running, final=final)
