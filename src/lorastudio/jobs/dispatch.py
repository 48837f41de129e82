"""The job service's dispatcher: one thread for the service's life that takes the next queued job
when the previous worker is gone, gives it the GPU(s) through the arbiter, starts its worker (a one-GPU job
is handed the standby worker when one waits, jobs/standby.py) and pumps it to the end (jobs/pump.py). A mixin of JobService (jobs/service.py), split out to keep
each file short: it uses the service's lock, queue, store, arbiter and bookkeeping (`_finish`,
`_log_status`). No torch, no HTTP.
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path

from lorastudio.errors import JobActive
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.persist import RETRY_S, STORE_ERRORS, JobRecorder, store_failure
from lorastudio.jobs.process import JobWorker, WorkerTarget
from lorastudio.jobs.pump import EventPump
from lorastudio.jobs.records import Job, JobStatus, now_iso
from lorastudio.jobs.standby import StandbyKeeper, StandbyProcess
from lorastudio.jobs.workers import new_job_worker
from lorastudio.settings import Settings

log = logging.getLogger("lorastudio.jobs")


class Dispatcher(EventPump):
    """The dispatcher half of JobService (see there for the attributes it shares)."""

    settings: Settings
    arbiter: GpuArbiter
    _recorder: JobRecorder
    _target: WorkerTarget
    _queue: collections.deque[Job]
    _resume_from: dict[str, Path]
    _active: Job | None
    _last: Job | None
    _worker: JobWorker | None
    _spawning: JobWorker | None  # the worker being started (its `start()` not returned yet)
    _closing: bool
    _generation: int
    _standby: StandbyKeeper | None  # None: every job spawns its worker (LORASTUDIO_STANDBY_WORKER=0)

    def _dispatch_loop(self) -> None:
        """Run queued jobs one after another until shutdown. Nothing a job does ends this loop:
        a store or file system failure fails that job (with the reason), a bug too."""
        while (job := self._next_job()) is not None:
            try:
                self._run(job)
            except STORE_ERRORS as err:
                log.error("job %s: the job service could not go on with it: %s", job.id, err)
                self._abandon(job, store_failure(err, self.store))
            except Exception:  # a bug must not kill the dispatcher: fail the job, keep serving
                log.exception("job %s failed inside the job service", job.id)
                self._abandon(job, "internal error in the job service (see the server log)")
            finally:
                with self._cond:
                    self._active = None
                    self._last = job
                    self._worker = None
                    self._stop_at = None
                    self._cond.notify_all()

    def _next_job(self) -> Job | None:
        """Wait for a job to run (None: the service is closing); meanwhile, retry the store
        writes that failed (a full disk) about once a second."""
        with self._cond:
            while True:
                ready = self._cond.wait_for(
                    lambda: self._closing or (self._active is None and bool(self._queue)),
                    timeout=RETRY_S if self._recorder.pending else None,
                )
                self._recorder.retry()
                if self._closing:
                    return None
                if ready:
                    job = self._queue.popleft()
                    self._active = job
                    return job

    def _start_worker(self, job: Job, generation: int, devices: tuple[int, ...]) -> tuple[JobWorker, int]:
        """Start `job`'s worker: a one-GPU job is handed the waiting standby worker when there
        is one fit for it (jobs/standby.py), else (or when it died just before) it gets a fresh
        process. Returns the worker and its pid. Raises OSError / RuntimeError (spawn failures)."""
        standby = None
        if self._standby is not None and job.worker_config.num_gpus <= 1:
            standby = self._standby.take()

        def make(standby: StandbyProcess | None) -> JobWorker:
            worker = new_job_worker(
                job.id, generation, job.worker_config, self.settings, target=self._target,
                devices=devices, resume=self._resume_from.get(job.id), standby=standby,
            )  # fmt: skip
            with self._cond:  # a shutdown from now on tells it to stop before it trains (`shutdown`)
                self._spawning = worker
                if self._closing:
                    worker.request_stop(False)
            return worker

        if standby is not None:
            worker = make(standby)
            try:
                pid = worker.start()
                log.info("job %s: handed to the standby worker (pid %d)", job.id, pid)
                return worker, pid
            except OSError as err:
                log.warning(
                    "job %s: the standby worker could not take it (%s); a fresh one starts", job.id, err
                )
                standby.end()
        worker = make(None)
        return worker, worker.start()

    def _abandon(self, job: Job, error: str) -> None:
        """Fail `job` after an unexpected error of the service, its worker killed."""
        with self._cond:
            worker = self._worker
        if worker is not None:
            worker.kill()
            worker.join(5.0)
        with self._cond:
            if job.live:
                self._finish(job, JobStatus.FAILED, error=error)

    def _end_unwanted(self, job: Job, worker: JobWorker) -> None:
        """Kill the worker of `job`, which a shutdown ended while the worker was being
        spawned (`shutdown` marked it interrupted, released its claim and told the worker to
        stop): it finished starting too late, and must not train."""
        log.info("job %s: its worker started after the server's stop; it is killed", job.id)
        worker.kill()
        worker.join(5.0)
        worker.close()

    def _run(self, job: Job) -> None:
        """Give `job` the GPU(s), start its worker, pump it to the end, free the GPU(s)."""
        try:
            devices = self.arbiter.begin_training(job.id, devices=job.worker_config.num_gpus)
        except JobActive as err:
            with self._cond:
                self._finish(job, JobStatus.FAILED, error=str(err))
            return
        try:
            with self._cond:
                if not job.live:  # a shutdown ended it while it waited for the GPU
                    return
                if job.status == JobStatus.STOPPING:  # stopped before its worker existed
                    self._finish(job, JobStatus.STOPPED, error=None)
                    return
                self._generation += 1
                generation = self._generation
            try:
                worker, pid = self._start_worker(job, generation, devices)
            finally:
                with self._cond:
                    self._spawning = None
            with self._cond:
                ended = not job.live  # a shutdown ended it while its worker was being spawned
                if not ended:
                    self._worker = worker
            if ended:
                self._end_unwanted(job, worker)
                return
            with self._cond:
                job.generation, job.pid, job.started_at = worker.generation, pid, now_iso()
                job.started_mono = time.monotonic()  # the page's Elapsed (Job.elapsed_s)
                if job.status == JobStatus.QUEUED:
                    job.status = JobStatus.PREPARING
                    self._log_status(job)
                elif job.stop_save is not None:  # a stop arrived while the worker was spawning
                    worker.request_stop(job.stop_save)
                self._recorder.record(job)
            self._pump(job, worker)
        except (OSError, RuntimeError) as err:  # spawn failures (no memory, bad __main__, ...)
            with self._cond:
                if job.live:  # not one a shutdown ended (interrupted) while it was being spawned
                    self._finish(job, JobStatus.FAILED, error=f"could not start the worker: {err}")
        finally:
            self.arbiter.end_training(job.id)  # normally already freed by `_finish`
