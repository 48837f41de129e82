"""The caption jobs' read side: a job's snapshot (of this server's life, else its record), the
recent jobs, a dataset's latest, the folders and models in use, the event log. A mixin of
CaptionJobs (jobs/captioning.py), split out to keep each file short: it reads the service's
lock and jobs and changes nothing (`wait` only waits). No torch, no HTTP.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from lorastudio.errors import NotFound
from lorastudio.event_log import EventLog
from lorastudio.jobs.caption_job import CaptionJob
from lorastudio.jobs.caption_records import KEEP, list_records, read_record
from lorastudio.settings import Settings


class CaptionQueries:
    """The queries half of CaptionJobs (see there for the attributes it shares)."""

    settings: Settings
    _lock: threading.Lock
    _jobs: dict[str, CaptionJob]
    _log: EventLog

    def get(self, job_id: str) -> dict[str, Any]:
        """The snapshot of a caption job: of this server's life, else its record (one of an
        earlier server or a CLI caption; "interrupted" when it was left running,
        jobs/caption_records.py). Raises NotFound."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None:
                return job.snapshot()
        recorded = read_record(self.settings.home, job_id)
        if recorded is None:
            raise NotFound(f"no caption job with id {job_id!r} (the newest {KEEP} are kept)")
        return recorded

    def recent(self, limit: int = KEEP) -> list[dict[str, Any]]:
        """The newest `limit` caption jobs (at most KEEP are recorded), newest first: this
        server's as they are now, the others from their records."""
        with self._lock:
            live = {j.id: j.snapshot() for j in self._jobs.values()}
        listed = [live.pop(r["id"], r) for r in list_records(self.settings.home, limit)]
        return [*reversed(live.values()), *listed][:limit]  # first: any whose record failed

    def latest(self, dataset: str) -> dict[str, Any]:
        """The newest caption job of `dataset` (of the recent ones). Raises NotFound when it
        has none."""
        for job in self.recent():
            if job["dataset"] == dataset:
                return job
        raise NotFound(f"dataset {dataset!r} has no recent caption job")

    def busy_jobs(self) -> dict[Path, str]:
        """Dataset folders being captioned now -> the caption job's id (JobService.watch_captioning)."""
        with self._lock:
            return {j.folder: j.id for j in self._jobs.values() if j.status == "running"}

    def models_in_use(self) -> set[Path]:
        """The captioner folders of running jobs (a model delete is refused meanwhile)."""
        with self._lock:
            return {j.model_folder for j in self._jobs.values() if j.status == "running" and j.model_folder}

    def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Wait for a job's thread to end (tests, shutdown); returns its snapshot."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"no caption job with id {job_id!r} in this server's life")
        if job.thread is not None:
            job.thread.join(timeout)
        return self.get(job_id)

    @property
    def event_seq(self) -> int:
        return self._log.seq

    def events_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        return self._log.after(seq)
