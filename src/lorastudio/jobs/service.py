"""The job service: one training job at a time, a FIFO queue behind it. Knows nothing of HTTP.

Life of a job: `submit` validates everything cheap (config, family, base model, dataset, output
name, precision) and only then records the job and queues it; a refused start changes nothing.
The dispatcher thread (alive as long as the service) takes the next job when the GPU is free,
gives it the GPU(s) through the arbiter (which frees the resident generation pipeline), starts
the worker (one spawned process; for num_gpus > 1 a torchrun launch of one rank per reserved
GPU, jobs/launcher.py, whose rank 0 sends the same tagged events) and pumps its events: each
one is fenced by worker identity, sanitised (non-finite -> None) and folded into the job's
snapshot under the lock, stored, and appended to the event log that the SSE stream reads. A
worker that dies without a terminal event fails the job with "exited unexpectedly (code N)" (a
launch: the rank or agent that died). A stop is cooperative first, then terminate, then kill;
it waits for a sample round or checkpoint in flight, up to a bound (jobs/busy.py). A step loop
silent past its allowance is stopped the same way, as hung (jobs/step_watch.py). Every run
records this server as its owner, so a reader without a server tells a killed server's runs
(RunStore.settle_dead_owners). The pump is in jobs/pump.py, the dispatcher in jobs/dispatch.py,
the queries (status, events, datasets in use, training memory) in jobs/service_queries.py,
the delete of a run's record and folder in jobs/service_delete.py.

Nothing a job does ends the dispatcher: a run store write that fails (a full disk) fails the
job with the reason ("no space left on device") and kills its worker; a job state the store
refused is written again about once a second until the store agrees (jobs/persist.py).

GPU hand-over: the job's training reservation in the arbiter is released the moment the job
turns final (terminal event ingested, or the process found dead), so generation may start while
a worker that already reported its end is still exiting. The next training job is dispatched
only once the previous worker process is gone, so two training processes never overlap.

Standby worker (LORASTUDIO_STANDBY_WORKER, jobs/standby.py): while no job starts, one worker
process waits with its imports done; a one-GPU job is handed it (when the environment it was
spawned with is still the one a fresh worker would get) and the next one is spawned once that
job runs its steps or ends. `shutdown` ends it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lorastudio.config_datasets import read_folder_fields
from lorastudio.errors import JobActive, NotFound
from lorastudio.event_log import EventLog
from lorastudio.jobs.busy import stop_conflict
from lorastudio.jobs.caption_gpu import planned_gpu_gib
from lorastudio.jobs.dataset_claims import DatasetClaim
from lorastudio.jobs.dataset_locks import claim_for_run
from lorastudio.jobs.dispatch import Dispatcher
from lorastudio.jobs.gone_check import refuse_if_gone
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.host_memory import refuse_if_short
from lorastudio.jobs.persist import STORE_ERRORS, JobRecorder, store_failure
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.process import JobWorker, Timeouts, WorkerTarget
from lorastudio.jobs.records import LIVE_STATUSES, Job, JobStatus, forget_oldest_finished, now_iso
from lorastudio.jobs.resume import validate_resume
from lorastudio.jobs.service_delete import RunDeletes
from lorastudio.jobs.service_queries import JobQueries
from lorastudio.jobs.standby import StandbyKeeper
from lorastudio.jobs.step_watch import HANG_MIN_S
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.validation import ValidatedRun, validate_run
from lorastudio.jobs.worker import worker_main
from lorastudio.name_reserve import NameHold, reserve_output_name
from lorastudio.processes import start_token
from lorastudio.settings import Settings

log = logging.getLogger("lorastudio.jobs")

FINISHED_KEPT = 32  # in memory for job(); a job holds up to 2,000 metric points (the store keeps all)


class JobService(JobQueries, RunDeletes, Dispatcher):
    """Runs training jobs one at a time. `start()` before use, `shutdown()` at the end."""

    def __init__(
        self,
        settings: Settings,
        store: RunStore,
        arbiter: GpuArbiter,
        *,
        timeouts: Timeouts | None = None,
        worker_target: WorkerTarget = worker_main,
        event_log_size: int = 5000,
        standby: bool | None = None,
    ):
        """standby: keep a standby worker for the next one-GPU job (jobs/standby.py); None:
        settings.standby_worker, for the real worker (a test's stand-in target gets none)."""
        self.settings = settings
        self.store = store
        self._recorder = JobRecorder(store)  # job state -> store, retried while the store fails
        self.arbiter = arbiter
        scale = settings.worker_timeout_scale  # a slow machine's setting raises the hang allowance too
        self.timeouts = timeouts or Timeouts(hang_min_s=HANG_MIN_S * scale)
        self._target = worker_target
        self._cond = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._jobs: dict[str, Job] = {}  # the live jobs and the newest FINISHED_KEPT finished ones
        self._resume_from: dict[str, Path] = {}  # job id -> checkpoint folder (resumed runs, until they end)
        self._active: Job | None = None
        self._last: Job | None = None
        self._worker: JobWorker | None = None
        self._spawning: JobWorker | None = None  # the worker being started (dispatch.py)
        self._stop_at: float | None = None  # monotonic time of the stop request
        self._generation = 0
        self._closing = False
        self._captioning: Callable[[], dict[Path, str]] = dict  # folder -> caption job (watch_captioning)
        self._claims: dict[str, DatasetClaim] = {}  # job id -> its datasets' read claim, while live
        self._names: dict[str, NameHold] = {}  # job id -> its defaulted output name's reservation, while live
        self.event_log = EventLog(event_log_size)  # appended to under self._cond only
        self._owner = (os.getpid(), start_token(os.getpid()))  # this server, recorded on each run
        self.ignored_events = 0  # events fenced off (superseded worker) or malformed
        self._thread = threading.Thread(target=self._dispatch_loop, name="lorastudio-jobs", daemon=True)
        if standby is None:
            standby = settings.standby_worker and worker_target is worker_main
        self._standby = StandbyKeeper(self._no_job_starting) if standby else None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> JobService:
        self._thread.start()
        if self._standby is not None:
            self._standby.start()
        return self

    def _no_job_starting(self) -> bool:
        """Whether a standby worker may be spawned now: no job is waiting for its worker or
        preparing (a standby's imports would compete with its loading), the service is open."""
        with self._cond:
            job = self._active
            starting = job is not None and job.status in {JobStatus.QUEUED, JobStatus.PREPARING}
            return not self._closing and not starting and not (self._queue and job is None)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop taking jobs, kill the running worker (its run is marked interrupted), and wait
        for the dispatcher to end (up to `timeout` s). A job whose worker has not started (it
        waits for the GPU, or is being spawned: seconds on a loaded host) ends here as a queued
        one does, claim and name released, the worker being spawned told to stop; the dispatcher
        kills it once its start returns, before it trains (dispatch.py). Nothing of a live job
        outlasts this call, however slow the spawn."""
        with self._cond:
            self._closing = True
            for job in self._queue:
                self._finish(job, JobStatus.INTERRUPTED, error="the server stopped before this run started")
            self._queue.clear()
            active = self._active
            if active is not None and active.live and self._worker is None:
                if self._spawning is not None:
                    self._spawning.request_stop(False)
                note = "the server stopped before this run's worker started"
                self._finish(active, JobStatus.INTERRUPTED, error=note)
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._standby is not None:
            self._standby.shutdown(timeout)
        with self._cond:
            self._recorder.retry()  # a last try for writes a full disk refused

    # -- queries (the rest: jobs/service_queries.py) ---------------------------------------------
    def job(self, job_id: str) -> dict[str, Any]:
        """Snapshot of a live job or of one of the newest FINISHED_KEPT finished. Raises NotFound."""
        with self._cond:
            if job_id not in self._jobs:
                raise NotFound(f"no job {job_id!r} live or among the newest {FINISHED_KEPT} finished ones")
            return self._jobs[job_id].snapshot()

    @contextlib.contextmanager
    def enqueues_held(self) -> Iterator[None]:
        """No job is queued while the block runs: a base model's delete decides (the live jobs'
        models) and moves the folder aside under it, so a start either is seen using it or sees
        it gone (`_enqueue`: ConfigError), never queued on a folder deleted under it."""
        with self._cond:
            yield

    def watch_captioning(self, busy: Callable[[], dict[Path, str]]) -> None:
        """Refuse runs on the folders `busy()` names (dataset folder -> running caption job id);
        it is called under this service's lock (jobs/dataset_locks.py gives the lock order)."""
        with self._cond:
            self._captioning = busy

    # -- commands --------------------------------------------------------------------------------
    def preflight(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate like `submit` and report what a run would do; changes nothing.
        Raises ConfigError listing every problem."""
        run = self._validate(raw)
        return preflight_report(run, home=self.settings.home)

    def submit(self, raw: Mapping[str, Any], queue: bool = True) -> dict[str, Any]:
        """Validate and queue a job; returns its snapshot. Raises ConfigError (every problem),
        JobActive when `queue` is False and a job is active or queued, HostMemoryShort when the
        run's forecast host RAM exceeds what this host has available (jobs/host_memory.py)."""
        run = self._validate(raw)
        warning = refuse_if_short(run)
        if warning:
            log.warning("%s", warning)
        gpu_plan = planned_gpu_gib(run.config, run.model_dir, run.scan)
        with self._cond:
            config, worker_config, hold = self._free_default_name(run)
            try:
                job = self._enqueue(config, worker_config, queue)
            except BaseException:
                hold.release()
                raise
            self._names[job.id] = hold
            job.gpu_plan = gpu_plan
            return job.snapshot()

    def _free_default_name(self, run: ValidatedRun) -> tuple[Any, Any, NameHold]:
        """`run`'s configs, with a defaulted output name reserved (name_reserve.py: held until
        the job ended), `-2`, `-3`, ... past one a job queued since its checks, a folder or
        another namer (a `lorastudio train` in the same second) took; the user's own name as it
        is (`_enqueue` refuses it), unheld. Caller holds the lock."""
        if run.default_name is None:
            return run.config, run.worker_config, NameHold(str(run.config.output_name))
        hold = reserve_output_name(run.default_name, self.settings.outputs_dir, self._live_output_names())
        if hold.name == run.config.output_name:
            return run.config, run.worker_config, hold
        name = {"output_name": hold.name}
        return run.config.model_copy(update=name), run.worker_config.model_copy(update=name), hold

    def submit_resume(
        self,
        run_id: str,
        checkpoint: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        queue: bool = True,
    ) -> dict[str, Any]:
        """Queue a job that continues run `run_id` in its output folder from a checkpoint (the
        newest unless `checkpoint` names one, "step-N"), with `overrides` of the settings that do
        not change the maths. The new job is a new run record sharing the output folder; its
        metric history and validation rounds start with the original run's up to the checkpoint step.
        Returns its snapshot. Raises NotFound (no such run or checkpoint), JobActive (busy
        without `queue`, the run or its folder live), ConfigError (every problem; each identity
        field that differs)."""
        record = self.store.get_run(run_id, max_points=0)
        if record["status"] in {s.value for s in LIVE_STATUSES}:
            raise JobActive(f"run {run_id} is {record['status']}; it cannot be resumed while live")
        with self._cond:
            taken = self._live_output_names()
        resume = validate_resume(
            self.settings.outputs_dir / record["output_name"],
            checkpoint,
            overrides or {},
            self.settings,
            live_output_names=taken,
        )
        with self._cond:
            job = self._enqueue(resume.config, resume.worker_config, queue, resume.checkpoint)
            job.gpu_plan = planned_gpu_gib(resume.config, None, None)  # its budget, if any
            rounds = [v for v in record["validation"] if v["step"] <= resume.step]
            try:
                # the history up to the checkpoint, spread over its steps, stored in one transaction
                earlier = self.store.metric_points(run_id, up_to=resume.step)
                for point in earlier:
                    job.history.add(point)
                self.store.add_metrics(job.id, earlier)
                for point in rounds:  # the validation rounds before the checkpoint, as its file has them
                    job.validation.append(point)
                    self.store.add_validation(job.id, point)
                job.steps_run = resume.step
                self.store.update_run(job.id, steps_run=resume.step, total_steps=resume.total_steps)
                if resume.warnings:  # said in the answer; the run's preflight says them again (1872)
                    job.dataset_warnings = list(resume.warnings)
                    self.store.set_dataset_warnings(job.id, job.dataset_warnings)
            except STORE_ERRORS as err:  # a full disk: the resume is refused, nothing runs
                self._queue.remove(job)
                self._finish(job, JobStatus.FAILED, error=store_failure(err, self.store))
                raise
            return job.snapshot()

    def _enqueue(self, config: Any, worker_config: Any, queue: bool, resume_from: Path | None = None) -> Job:
        """Record and queue a validated job (caller holds the lock). Raises JobActive (also when
        a caption job writes one of its datasets), DatasetBusy (another process writes one),
        NotFound (a resume whose checkpoint a delete removed after its checks), ConfigError (its
        base model deleted, a dataset renamed or deleted, after its checks)."""
        if self._closing:
            raise JobActive("the server is shutting down")
        if not queue and self._busy():
            raise JobActive("a training job is already running; stop it or queue this one")
        if config.output_name in self._live_output_names():
            raise JobActive(f"output name {config.output_name!r} is used by a live job")
        if resume_from is not None and not resume_from.is_dir():  # a delete landed since its checks
            raise NotFound(
                f"the checkpoint {resume_from} of {config.output_name!r} is gone (the run was deleted?)"
            )
        job = Job(id=uuid.uuid4().hex[:12], config=config, worker_config=worker_config)
        fields = read_folder_fields(config, self.settings.datasets_dir)  # data, controls, validation
        claim = claim_for_run(  # caption jobs here and other processes' caption writers
            self.settings.home, self.settings.datasets_dir, [f for _, f in fields], self._captioning(),
            f"training job {job.id} of the lorastudio server",
        )  # fmt: skip
        try:
            refuse_if_gone(config, fields, None if resume_from else self.settings)  # gone since its checks
            self.store.create_run(
                job.id,
                config.output_name or "",
                job.config.family,
                job.config.model_dump(mode="json"),
                job.created_at,
                owner=self._owner,  # a reader without a server marks it interrupted once this process is gone
            )
        except BaseException:
            claim.release()
            raise
        self._claims[job.id] = claim
        if resume_from is not None:
            self._resume_from[job.id] = resume_from
        self._jobs[job.id] = job
        self._queue.append(job)
        self._log_status(job)
        self._cond.notify_all()
        return job

    def stop(self, save: bool, job_id: str | None = None) -> dict[str, Any]:
        """Stop the active job (or cancel queued job `job_id`). save=True keeps a LoRA of the
        steps run. Returns the job's snapshot. Raises NotFound if there is nothing to stop,
        JobActive when a stop that asked the other way (another tab or client) is pending: the
        worker may have read that one already, so this one's answer could not be kept."""
        with self._cond:
            queued = next((j for j in self._queue if j.id == job_id), None)
            if queued is not None:
                self._queue.remove(queued)
                self._finish(queued, JobStatus.CANCELLED, error=None)
                return queued.snapshot()
            job = self._active
            if job is None or not job.live or (job_id is not None and job.id != job_id):
                raise NotFound("no training job is running" + (f" with id {job_id!r}" if job_id else ""))
            if job.stop_save is not None and job.stop_save != save:
                raise JobActive(stop_conflict(job.id, job.stop_save))
            job.stop_save = save
            if job.status != JobStatus.STOPPING:
                job.status = JobStatus.STOPPING
                self._stop_at = time.monotonic()
                self._recorder.record(job)
                self._log_status(job)
            worker = self._worker
            snapshot = job.snapshot()
        if worker is not None:
            worker.request_stop(save)
        return snapshot

    # -- validation ------------------------------------------------------------------------------
    def _validate(self, raw: Mapping[str, Any]) -> ValidatedRun:
        with self._cond:
            taken = self._live_output_names()
        return validate_run(raw, self.settings, live_output_names=taken, check_targets=True)

    # -- bookkeeping (callers hold the lock) -------------------------------------------------------
    def _finish(self, job: Job, status: JobStatus, error: str | None) -> None:
        """Make `job` final: record it, log its status and free its GPU reservation (a no-op
        for a job that does not hold it), all before any reader can see the final status."""
        job.status = status
        job.error = error
        job.busy = None
        job.finished_at, job.finished_mono = now_iso(), time.monotonic()
        self._recorder.record(job)  # a failed write is retried until the store has it
        self.arbiter.end_training(job.id)
        claim = self._claims.pop(job.id, None)
        if claim is not None:
            claim.release()
        name_hold = self._names.pop(job.id, None)
        if name_hold is not None:
            name_hold.release()
        self._resume_from.pop(job.id, None)
        forget_oldest_finished(self._jobs, FINISHED_KEPT)
        self._log_status(job)

    def _log_status(self, job: Job) -> None:
        self._log_event(job, {"type": "status", "status": job.status.value, "error": job.error})

    def _log_event(self, job: Job, data: dict[str, Any]) -> None:
        self.event_log.append({**data, "job_id": job.id})
        self._cond.notify_all()
