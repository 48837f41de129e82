"""The job service's writes of job state to the run store, tolerant of a failing store.

A store write can fail (a full disk: NoSpaceLeft; a broken or locked database: sqlite3.Error;
the file system: OSError). The job service must go on either way: its in-memory job is the
truth while the process lives, so a write that fails is remembered and retried (`retry`, called
by the dispatcher about once a second) until the store agrees again. What the service needs
written is always "the job as it is now", so a retry writes the job's whole state, not the
failed call. No torch, no HTTP; callers hold the job service's lock.
"""

from __future__ import annotations

import logging
import sqlite3

from lorastudio.errors import NoSpaceLeft, is_no_space
from lorastudio.jobs.records import Job
from lorastudio.jobs.store import RunStore

log = logging.getLogger("lorastudio.jobs")

# What a run store write may raise besides programming errors.
STORE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, OSError, NoSpaceLeft)
RETRY_S = 1.0  # how often the dispatcher retries writes that failed


def store_failure(err: BaseException, store: RunStore) -> str:
    """The error a job fails with when its progress could not be stored."""
    if is_no_space(err):
        return (
            f"no space left on device: the run store ({store.path}) could not be written, so the "
            "worker was stopped; free some space and start or resume the run again"
        )
    return f"the run store ({store.path}) could not be written ({err}); the worker was stopped"


class JobRecorder:
    """Writes jobs to the run store; a failed write leaves the job pending until `retry`."""

    def __init__(self, store: RunStore):
        self.store = store
        self._pending: dict[str, Job] = {}

    @property
    def pending(self) -> list[str]:
        """Ids of the jobs whose latest state the store does not have yet."""
        return list(self._pending)

    def record(self, job: Job) -> bool:
        """Write `job`'s state as it is now (a final job: `RunStore.finish_run`, else its
        status, start time and steps run). Returns False (and keeps it pending) on failure."""
        try:
            if job.live:
                self.store.update_run(
                    job.id, status=job.status, started_at=job.started_at, steps_run=job.steps_run
                )
            else:
                self.store.finish_run(
                    job.id, job.status, job.finished_at or "", job.error, job.steps_run, job.lora_path,
                    job.elapsed_s(),  # the server's monotonic clock: no wall-clock step in it
                )  # fmt: skip
        except STORE_ERRORS as err:
            if job.id not in self._pending:
                log.error("run %s: its %s status could not be stored (%s); retrying", job.id, job.status, err)
            self._pending[job.id] = job
            return False
        if self._pending.pop(job.id, None) is not None:
            log.info("run %s: the store has its %s status again", job.id, job.status.value)
        return True

    def retry(self) -> int:
        """Write every pending job again; returns how many are still pending."""
        for job in list(self._pending.values()):
            self.record(job)
        return len(self._pending)
