"""What the job service knows about one job, and the one place numbers are made JSON-safe.

No torch, no HTTP. `sanitize` turns every non-finite float (NaN, +/-Inf) into None; the job
service applies it to every event at its single ingestion point, so every snapshot, SSE event
and stored metric is strict JSON.
"""

from __future__ import annotations

import datetime
import math
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from lorastudio.config import TrainConfig


class JobStatus(StrEnum):
    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    STOPPED = "stopped"
    CANCELLED = "cancelled"  # a queued job stopped before it started
    FAILED = "failed"
    INTERRUPTED = "interrupted"


# A job in one of these holds (or waits for) the GPU; the others are final.
LIVE_STATUSES: frozenset[JobStatus] = frozenset(
    {JobStatus.QUEUED, JobStatus.PREPARING, JobStatus.RUNNING, JobStatus.STOPPING}
)
FINAL_STATUSES: frozenset[JobStatus] = frozenset(set(JobStatus) - LIVE_STATUSES)

# Keys of a Progress event kept in a metric point.
METRIC_KEYS: tuple[str, ...] = (
    "step",
    "epoch",
    "loss",
    "avg_loss",
    "lr",
    "grad_norm",
    "samples_per_second",
    "peak_memory_gb",
)


def now_iso() -> str:
    """The current UTC time as an ISO-8601 string with milliseconds."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def sanitize(value: Any) -> Any:
    """A copy of `value` (nested dicts/lists/tuples) with every non-finite float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    return value


class MetricHistory:
    """Metric points of one run, at most `cap` of them.

    A point whose loss is missing (non-finite before sanitising) is skipped. When the history
    grows past `cap`, every other point is dropped and the minimum step distance between kept
    points doubles, so the history always spans the whole run with even-ish density.
    """

    def __init__(self, cap: int = 2000):
        if cap < 2:
            raise ValueError("cap must be at least 2")
        self.cap = cap
        self.stride = 1
        self.points: list[dict[str, Any]] = []

    def add(self, point: dict[str, Any]) -> bool:
        """Add a sanitised metric point; returns True when it was kept."""
        if point.get("loss") is None or not isinstance(point.get("step"), int):
            return False
        if self.points and point["step"] - self.points[-1]["step"] < self.stride:
            return False
        self.points.append(point)
        if len(self.points) > self.cap:
            self.points = self.points[::2]
            self.stride *= 2
        return True

    def since(self, step: int | None) -> list[dict[str, Any]]:
        """Points with step > `step` (all points when `step` is None)."""
        if step is None:
            return list(self.points)
        return [p for p in self.points if p["step"] > step]


def metric_point(progress: dict[str, Any]) -> dict[str, Any]:
    """The metric point of a (sanitised) progress event dict."""
    return {k: progress.get(k) for k in METRIC_KEYS}


@dataclass
class Job:
    """One training job as the service tracks it (mutated only under the service lock)."""

    id: str
    config: TrainConfig  # resolved: every family default filled (what the API shows and stores)
    worker_config: TrainConfig  # what the worker gets: the config as given + resolved paths/name
    status: JobStatus = JobStatus.QUEUED
    created_at: str = field(default_factory=now_iso)
    started_at: str | None = None
    finished_at: str | None = None
    phase: dict[str, Any] | None = None  # the last model-load / preparing event
    progress: dict[str, Any] | None = None  # the last progress event
    samples: dict[str, Any] | None = None  # the last sample_ready event: {step, images (run-relative)}
    plan: dict[str, Any] | None = None  # the plan_chosen event: how the denoiser phase runs
    history: MetricHistory = field(default_factory=MetricHistory)
    validation: list[dict[str, Any]] = field(default_factory=list)  # validation rounds: {step, loss}
    lora_path: str | None = None
    steps_run: int = 0
    total_steps: int | None = None  # the run's length as its last progress event said
    error: str | None = None
    warnings: list[str] = field(default_factory=list)  # what failed without failing it (warning events)
    dataset_warnings: list[str] = field(default_factory=list)  # what may hurt it (DatasetWarnings event)
    stop_save: bool | None = None  # set when a stop was requested
    stop_reason: str | None = None  # why the service itself stopped it (hung: jobs/step_watch.py)
    generation: int = 0  # identity of the worker process that runs it (0 = none yet)
    pid: int | None = None
    busy: dict[str, Any] | None = None  # work in flight a stop waits for: {work, step, since} (jobs/busy.py)
    busy_changed_at: float | None = None  # monotonic time busy last changed
    started_mono: float | None = None  # monotonic time of started_at; finished_mono: of finished_at
    finished_mono: float | None = None
    gpu_plan: tuple[float, str] | None = None  # planned GPU peak (GiB) and its source (jobs/caption_gpu.py)

    @property
    def live(self) -> bool:
        return self.status in LIVE_STATUSES

    def elapsed_s(self) -> float | None:
        """Seconds from the worker's start to the job's end (to now while live) on the server's
        monotonic clock; None before it started. A page shows this, not its own clock's now less
        `started_at` (the server's wall clock: another machine's, or stepped since)."""
        if self.started_mono is None:
            return None
        return round((self.finished_mono or time.monotonic()) - self.started_mono, 1)

    def snapshot(self, since: int | None = None) -> dict[str, Any]:
        """A JSON-able view; `since` limits the metric points to steps after it and the validation
        rounds to those from it on (a round follows its step's progress event: one of the step a
        client saw last may be new to it), so a client's poll costs the same at any step of a long
        run (RELIABILITY 1294)."""
        return {
            "id": self.id,
            "status": self.status.value,
            "output_name": self.config.output_name,
            "family": self.config.family,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "elapsed_s": self.elapsed_s(),
            "phase": self.phase,
            "progress": self.progress,
            "samples": self.samples,
            "plan": self.plan,
            "metrics": self.history.since(since),
            "validation": [v for v in self.validation if since is None or v["step"] >= since],
            "lora_path": self.lora_path,
            "steps_run": self.steps_run,
            "error": self.error,
            "warnings": list(self.warnings),
            "dataset_warnings": list(self.dataset_warnings),
            "pid": self.pid,
            "stop_requested": None if self.stop_save is None else {"save": self.stop_save},
            "busy": self.busy,
            "config": self.config.model_dump(mode="json"),
        }


def forget_oldest_finished(jobs: dict[str, Job], keep: int) -> None:
    """Drop all but the newest `keep` finished jobs of `jobs` (in submission order: the oldest
    go first); the live ones all stay."""
    finished = [job_id for job_id, j in jobs.items() if not j.live]
    for job_id in finished[: max(0, len(finished) - keep)]:
        del jobs[job_id]
