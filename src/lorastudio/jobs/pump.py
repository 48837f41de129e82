"""The job service's pump: a running worker's events folded into its job, stored and logged,
until the worker has exited; the stop deadline enforced meanwhile (jobs/busy.py). Then what its
processes left in the run folder goes (jobs/leftovers.clear_abandoned_run: a fresh run killed or
failed before its first checkpoint or LoRA leaves none of what it wrote, nor its folder unless
someone else's file is in it; the log and the run record stay, the record saying what went). A mixin of
JobService (jobs/service.py), split out to keep each file short: it uses the service's lock,
store, event log and bookkeeping (`_finish`, `_log_status`, `_log_event`). No torch, no HTTP.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from pathlib import Path
from typing import Any

from lorastudio.jobs.busy import stop_deadline
from lorastudio.jobs.ingest import TERMINAL_EVENTS, fold_event, parse_tagged
from lorastudio.jobs.killed_notes import record_note
from lorastudio.jobs.leftovers import clear_abandoned_run, removal_note
from lorastudio.jobs.persist import STORE_ERRORS, JobRecorder, store_failure
from lorastudio.jobs.process import JobWorker, TaggedEvent, Timeouts
from lorastudio.jobs.records import Job, JobStatus
from lorastudio.jobs.step_watch import StepWatch
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

log = logging.getLogger("lorastudio.jobs")

POLL_S = 0.1  # how often the pump checks the worker between events
DRAIN_S = 0.3  # how long to wait for the last events of a worker that exited


class EventPump(abc.ABC):
    """The pump half of JobService (see there for the attributes it shares; the abstract
    methods are the service's bookkeeping, which JobService implements)."""

    _cond: threading.Condition
    _closing: bool
    _stop_at: float | None
    timeouts: Timeouts
    store: RunStore
    _recorder: JobRecorder
    ignored_events: int
    settings: Settings

    @abc.abstractmethod
    def _finish(self, job: Job, status: JobStatus, error: str | None) -> None:
        """Implemented by JobService."""

    @abc.abstractmethod
    def _log_status(self, job: Job) -> None:
        """Implemented by JobService."""

    @abc.abstractmethod
    def _log_event(self, job: Job, data: dict[str, Any]) -> None:
        """Implemented by JobService."""

    def _pump(self, job: Job, worker: JobWorker) -> None:
        """Fold the worker's events into `job` until it ended and the process exited; a step
        loop silent past its allowance is stopped as hung (jobs/step_watch.py)."""
        ended_at: float | None = None  # monotonic time of the terminal event
        watch = StepWatch(self.timeouts.hang_min_s, self.timeouts.hang_step_factor)
        while True:
            item = worker.next_event(POLL_S)
            if item is not None:
                if self._ingest_or_fail(job, worker, item, watch) and ended_at is None:
                    ended_at = time.monotonic()
            elif worker.exitcode is not None:
                self._drain(job, worker)
                break
            if self._closing:
                worker.kill()
                worker.join(5.0)
                with self._cond:
                    if job.live:
                        self._finish(job, JobStatus.INTERRUPTED, error="the server stopped during this run")
                break
            with self._cond:  # a stop waits for a sample round or checkpoint in flight (jobs/busy.py)
                hung = watch.overdue(job, time.monotonic())
                if hung is not None:
                    ranks = worker.silence_note(watch.allowance_s())  # a multi-GPU job's silent rank(s)
                    self._stop_hung(job, worker, f"{hung} ({ranks})" if ranks else hung)
                deadline = stop_deadline(self._stop_at, job.busy, job.busy_changed_at, self.timeouts)
            worker.escalate(self.timeouts, deadline, ended_at)
        if job.config.output_name:  # a fresh run that ended before its first file: no empty folder
            self._remove_abandoned(job, self.settings.outputs_dir / job.config.output_name)
        with self._cond:
            if job.live:
                if job.status == JobStatus.STOPPING and job.stop_reason is not None:
                    note = (
                        f"{job.stop_reason}; it did not answer the stop and was terminated; no LoRA was saved"
                    )
                    self._finish(job, JobStatus.FAILED, error=note)
                elif job.status == JobStatus.STOPPING:
                    note = "the worker did not stop in time and was terminated; no LoRA was saved"
                    self._finish(job, JobStatus.STOPPED, error=note)
                else:
                    self._finish(job, JobStatus.FAILED, error=worker.failure_reason())
        worker.close()

    def _remove_abandoned(self, job: Job, run_dir: Path) -> None:
        """What `job`'s dead processes left in `run_dir` goes (jobs/leftovers.py); when that was
        what a killed fresh run wrote, its record says what went and what stayed: `job`'s, or the
        record the folder's mark names when that is another run's (its folder moved in since)."""
        cleared = clear_abandoned_run(run_dir)
        note = removal_note(run_dir, cleared.removed)
        if note is None:
            return
        if cleared.run_id is not None and cleared.run_id != job.id:
            log.warning("run %s: %s", cleared.run_id, note)
            record_note(self.settings, run_dir, cleared.run_id, note, store=self.store)
            return
        log.warning("job %s: %s", job.id, note)
        with self._cond:
            job.warnings.append(note)
        try:
            self.store.add_warning(job.id, note)
        except STORE_ERRORS as err:  # the log has it
            log.error("job %s: storing the clean-up note failed: %s", job.id, err)

    def _stop_hung(self, job: Job, worker: JobWorker, reason: str) -> None:
        """Stop `job`, silent past its allowance, as a stop-and-save with the stop path's grace
        (caller holds the lock): a worker that was only slow saves and ends stopped, with
        `reason` as its note; one that does not answer is terminated, then killed, and fails."""
        log.error("job %s: %s", job.id, reason)
        job.stop_reason, job.stop_save, job.status = reason, True, JobStatus.STOPPING
        self._stop_at = time.monotonic()
        self._recorder.record(job)
        self._log_status(job)
        worker.request_stop(True)

    def _drain(self, job: Job, worker: JobWorker) -> None:
        """Ingest what the exited worker still had in flight."""
        while (item := worker.next_event(DRAIN_S)) is not None:
            self._ingest_or_fail(job, worker, item)

    def _ingest_or_fail(
        self, job: Job, worker: JobWorker, item: TaggedEvent, watch: StepWatch | None = None
    ) -> bool:
        """`_ingest`; when the store cannot record the event (a full disk), the job fails with
        the reason and its worker is killed (its progress could not be kept). Returns True if
        the job ended."""
        try:
            return self._ingest(job, item, watch)
        except STORE_ERRORS as err:
            log.error("job %s: storing a worker event failed: %s", job.id, err)
            worker.kill()
            with self._cond:
                if job.live:
                    self._finish(job, JobStatus.FAILED, error=store_failure(err, self.store))
            return True

    def _ingest(self, job: Job, item: TaggedEvent, watch: StepWatch | None = None) -> bool:
        """The one ingestion point: fence by worker identity, fold (`ingest.fold_event`), log,
        store; `watch` notes the event. Returns True if `item` was `job`'s terminal event."""
        parsed = parse_tagged(item)
        if parsed is None:
            self.ignored_events += 1
            return False
        generation, pid, data = parsed
        with self._cond:
            if generation != job.generation or pid != job.pid or not job.live:
                self.ignored_events += 1
                return False
            folded = fold_event(job, data)
            if watch is not None:
                watch.saw(data, time.monotonic())
            if folded.now_running:
                self._log_status(job)
                self.store.update_run(job.id, status=job.status)  # under the lock: a stop comes after
            self._log_event(job, data)
            if folded.final is not None:
                status, error = folded.final
                hung = job.stop_reason if status == JobStatus.STOPPED else None  # slow, not hung: it saved
                self._finish(job, status, error or hung)
        if folded.plan is not None:
            self.store.set_plan(job.id, folded.plan)
        if folded.validation is not None:
            self.store.add_validation(job.id, folded.validation)
        if folded.warning is not None:
            self.store.add_warning(job.id, folded.warning)
        if folded.final is not None and (note := discard_note(job)) is not None:
            self.store.add_warning(job.id, note)  # the record's word (the Live page's: stop_requested)
        if folded.dataset_warnings is not None:
            self.store.set_dataset_warnings(job.id, folded.dataset_warnings)
        if folded.point is not None:
            self.store.add_metric(job.id, folded.point)
        elif data["type"] == "progress":
            self.store.update_run(job.id, steps_run=job.steps_run)
        if folded.total_steps is not None:  # an epoch run's length, known from its first step
            self.store.update_run(job.id, total_steps=folded.total_steps)
        return data["type"] in TERMINAL_EVENTS


def discard_note(job: Job) -> str | None:
    """What the run record says of `job` stopped without save (a discard), else None: its stored
    record read `stopped` with no outputs and no resume point, like a stop before the first step,
    and only the Live page (the job in memory, `stop_requested`) said what went (RELIABILITY 1907)."""
    if job.status != JobStatus.STOPPED or job.stop_save is not False or job.lora_path:
        return None
    return (
        f"stopped without save at step {job.steps_run}: no LoRA was written, and the checkpoints, LoRA "
        "snapshots and sample previews this session wrote were deleted (a resumed run keeps what it resumed from)"
    )
