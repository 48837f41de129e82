"""The job service's read side: its status, its event log, the datasets its live jobs read and
what is known of the active job's GPU memory. A mixin of JobService (jobs/service.py), split out
to keep each file short: it reads the service's lock, queue and jobs, and changes nothing. No
torch, no HTTP.
"""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import Any

from lorastudio.config_datasets import read_folders
from lorastudio.event_log import EventLog
from lorastudio.jobs.caption_gpu import TrainingMemory
from lorastudio.jobs.records import Job
from lorastudio.settings import Settings


class JobQueries:
    """The queries half of JobService (see there for the attributes it shares)."""

    settings: Settings
    event_log: EventLog
    _cond: threading.Condition
    _queue: collections.deque[Job]
    _active: Job | None
    _last: Job | None

    def status(self, since: int | None = None) -> dict[str, Any]:
        """{"job": the active (else the latest) job's snapshot or None, "queue": queued jobs,
        "busy": whether a start without queueing would be refused, "event_seq": last event id}.
        The snapshot reflects exactly the events up to event_seq: both are read under the lock
        that every event is folded and logged under (pump._ingest, _log_event)."""
        with self._cond:
            job = self._active or self._last
            return {
                "job": job.snapshot(since) if job else None,
                "queue": [{"id": j.id, "output_name": j.config.output_name} for j in self._queue],
                "busy": self._busy(),
                "event_seq": self.event_log.seq,
            }

    @property
    def event_seq(self) -> int:
        """Id of the latest event (0 before the first)."""
        return self.event_log.seq

    def events_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        """Events with id > seq, oldest first (the log keeps the most recent ones only)."""
        return self.event_log.after(seq)

    def datasets_in_use(self) -> set[Path]:
        """Dataset folders (resolved) that the active or a queued job reads (data_dir, or every
        datasets entry's folder, and a validation folder: config_datasets.read_folders)."""
        with self._cond:
            return {p for j in self._live_jobs() for p in read_folders(j.config, self.settings.datasets_dir)}

    def writer_of(self, output_name: str) -> str | None:
        """The id of the live (queued or running) job that writes outputs/`output_name` (a fresh
        run of that name, or a resume or extension of one), None when none does."""
        with self._cond:
            return next((j.id for j in self._live_jobs() if j.config.output_name == output_name), None)

    def training_memory(self) -> TrainingMemory | None:
        """What is known of the live active training job's GPU memory (None: no live active
        job): its planned peak (memory_budget_gb or the preflight estimate, taken at submit) and
        its measured peak so far (the last progress event's peak_memory_gb, GiB). Read by the
        caption jobs (jobs/caption_gpu.py)."""
        with self._cond:
            job = self._active
            if job is None or not job.live:
                return None
            planned, source = job.gpu_plan or (None, None)
            measured = (job.progress or {}).get("peak_memory_gb")
            return TrainingMemory(
                job.id, planned, source, measured if isinstance(measured, float | int) else None
            )

    # -- (callers hold the lock) -------------------------------------------------------------------
    def _busy(self) -> bool:
        """A live active job or a queued one; a final job whose worker is still exiting does not
        count (a new job is accepted and dispatched once that process is gone)."""
        return (self._active is not None and self._active.live) or bool(self._queue)

    def _live_jobs(self) -> list[Job]:
        return ([self._active] if self._active and self._active.live else []) + list(self._queue)

    def _live_output_names(self) -> set[str]:
        return {j.config.output_name for j in self._live_jobs() if j.config.output_name}
