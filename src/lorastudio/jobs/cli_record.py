"""A `lorastudio train` run in the run store, as the job service records its own runs.

The CLI trains in its own process, without the job service; this records the same run record
(marked source "cli"): its resolved config, status, metric points, plan, outputs and error, so
the run is listed under Runs (API, UI, `runs list`) next to the server's runs. The events are
folded exactly as the job service folds them (jobs/ingest.py). A server never runs next to a
CLI run on one home (jobs/homelock.py). The record names this process (pid and start token,
lorastudio.processes): a CLI run killed outright, which cannot record its end, is marked
interrupted by the next reader of the runs (API, UI, `runs list|show`: RunStore.settle_dead_owners).

Recording is a copy, never a reason to stop training: a store that cannot be written (a full
disk, a locked database) is reported once on stderr and recording ends; the run goes on. No
torch, no HTTP.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.jobs.ingest import fold_event
from lorastudio.jobs.persist import STORE_ERRORS
from lorastudio.jobs.records import Job, JobStatus, now_iso, sanitize
from lorastudio.jobs.run_owner import hold_owner_lock, release_owner_lock
from lorastudio.jobs.store import RunStore
from lorastudio.processes import start_token
from lorastudio.settings import Settings, get_settings
from lorastudio.training.events import Event


def open_cli_record(
    config: TrainConfig, settings: Settings | None = None, run_id: str | None = None
) -> CliRunRecord | None:
    """The started record of a CLI run with `config` in the studio's run store (`run_id`: its id,
    chosen by a launching `train --gpus N`, jobs/launch_report.py; None: a new one); None (with a
    note on stderr) when the store cannot be opened or written: the run goes on unrecorded.
    Raises ConfigError when the config is not valid for its family (the engine would refuse it)."""
    from lorastudio.config import resolve_train_config

    settings = settings or get_settings()
    resolved = resolve_train_config(config)
    try:
        store = RunStore.open(settings.db_path, recover=False)
    except STORE_ERRORS as err:
        print(f"note: this run is not recorded in the run store ({settings.db_path}): {err}", file=sys.stderr)
        return None
    return CliRunRecord(store, config, resolved, run_id).start()


def new_run_id() -> str:
    """A fresh run record id (12 hex digits, as the job service's)."""
    return uuid.uuid4().hex[:12]


class CliRunRecord:
    """The run record of one CLI training run. `start()`, pass each engine event to `emit`,
    then `end(...)` (or `fail` / `abort`) once; `close()` releases the store."""

    def __init__(
        self, store: RunStore, config: TrainConfig, resolved: TrainConfig, run_id: str | None = None
    ):
        """config: what the engine trains with; resolved: the same with every family default
        filled (what the run record shows, as for the job service's runs); run_id: the record's
        id (None: a new one)."""
        self.store = store
        self.job = Job(id=run_id or new_run_id(), config=resolved, worker_config=config)
        self._on = True
        self._owner_fd: int | None = None  # the run's owner lock (jobs/run_owner.py), from start()

    @property
    def run_id(self) -> str:
        return self.job.id

    def start(self) -> CliRunRecord:
        """Record the run as preparing (it starts at once: no queue)."""
        job = self.job
        job.status, job.started_at = JobStatus.PREPARING, now_iso()
        job.started_mono = time.monotonic()  # its Duration (Job.elapsed_s), never two wall-clock stamps apart
        self._owner_fd = hold_owner_lock(self.store.path.parent, job.id)  # before the live record
        self._write(
            lambda: (
                self.store.create_run(
                    job.id,
                    job.config.output_name or "",
                    job.config.family,
                    job.config.model_dump(mode="json"),
                    job.created_at,
                    source="cli",
                    status=JobStatus.PREPARING,
                    owner=(os.getpid(), start_token(os.getpid())),
                ),
                self.store.update_run(job.id, started_at=job.started_at),
            )
        )
        return self

    def carry_over(self, step: int) -> None:
        """Start a resumed run's record with the history of the run it continues, as the job
        service's resume does: the metric points and validation rounds up to the checkpoint's
        `step`, from the newest other record of the same output folder that reached it (none
        found: the record starts at the checkpoint, as before)."""
        job = self.job

        def copy() -> None:
            # every record of the folder, newest first: the newest 200 runs of the home missed a
            # run older than them, and its history was lost (RELIABILITY 1222)
            ids = [
                i
                for i in reversed(self.store.runs_with_output_name(job.config.output_name or ""))
                if i != job.id
            ]
            runs = (self.store.get_run(i, max_points=0) for i in ids)
            record = next((r for r in runs if r["steps_run"] >= step), None)
            if record is None:
                return
            earlier = self.store.metric_points(record["id"], up_to=step)  # in one transaction (1292)
            for point in earlier:
                job.history.add(point)
            self.store.add_metrics(job.id, earlier)
            for point in (v for v in record["validation"] if v["step"] <= step):
                job.validation.append(point)
                self.store.add_validation(job.id, point)
            job.steps_run = max(job.steps_run, step)
            self.store.update_run(job.id, steps_run=job.steps_run)

        self._write(copy)

    def wrap(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        """An event sink that records each event, then passes it to `emit`."""

        def both(event: Event) -> None:
            self.emit(event)
            emit(event)

        return both

    def emit(self, event: Event) -> None:
        """Fold one engine event into the record (as jobs/pump.py does for a worker's events)."""
        if not self._on or not self.job.live:
            return
        data = sanitize(event.model_dump(mode="python"))
        folded = fold_event(self.job, data)
        job = self.job
        if folded.now_running:
            self._write(lambda: self.store.update_run(job.id, status=job.status))
        if folded.plan is not None:
            self._write(lambda: self.store.set_plan(job.id, folded.plan))
        if folded.dataset_warnings is not None:
            said = folded.dataset_warnings
            self._write(lambda: self.store.set_dataset_warnings(job.id, said))
        if folded.point is not None:
            self._write(lambda: self.store.add_metric(job.id, folded.point))
        elif data["type"] == "progress":
            self._write(lambda: self.store.update_run(job.id, steps_run=job.steps_run))
        if folded.total_steps is not None:  # an epoch run's length, known from its first step
            total = folded.total_steps
            self._write(lambda: self.store.update_run(job.id, total_steps=total))
        if folded.validation is not None:
            self._write(lambda: self.store.add_validation(job.id, folded.validation))
        if folded.warning is not None:
            warning = folded.warning
            self._write(lambda: self.store.add_warning(job.id, warning))
        if folded.final is not None:
            self._finish(*folded.final)

    def end(self, stopped: bool, steps_run: int, lora_path: Any) -> None:
        """The engine returned: record its result unless its complete event already did."""
        if self.job.live:
            self.job.steps_run = max(self.job.steps_run, steps_run)
            self.job.lora_path = str(lora_path) if lora_path is not None else None
            self._finish(JobStatus.STOPPED if stopped else JobStatus.COMPLETED, None)

    def fail(self, message: str) -> None:
        """The run ended with an error the engine did not report (a no-op once it is final)."""
        if self.job.live:
            self._finish(JobStatus.FAILED, message)

    def abort(self, message: str) -> None:
        """The run was cut short where it was (a second Ctrl-C, or a signal before the run's own
        handler): interrupted. Also over the engine's Error event of that same interruption (a
        KeyboardInterrupt inside train() is reported as "training interrupted" before it reaches
        the command), which had marked the record failed; a completed or stopped record stays."""
        if self.job.live or self.job.status == JobStatus.FAILED:
            self._finish(JobStatus.INTERRUPTED, message)

    def _finish(self, status: JobStatus, error: str | None) -> None:
        job = self.job
        job.status, job.error, job.finished_at = status, error, now_iso()
        job.finished_mono = time.monotonic()
        elapsed = job.elapsed_s()
        self._write(
            lambda: self.store.finish_run(
                job.id, status, job.finished_at or "", error, job.steps_run, job.lora_path, elapsed
            )
        )
        self._release_owner()  # after the end is recorded

    def _release_owner(self) -> None:
        fd, self._owner_fd = self._owner_fd, None
        release_owner_lock(self.store.path.parent, self.job.id, fd)

    def _write(self, action: Callable[[], Any]) -> None:
        if not self._on:
            return
        try:
            action()
        except STORE_ERRORS as err:
            self._on = False
            print(
                f"note: this run is no longer recorded in the run store ({self.store.path}): {err}",
                file=sys.stderr,
            )

    def close(self) -> None:
        self._release_owner()
        self.store.close()
