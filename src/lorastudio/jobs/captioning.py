"""Caption jobs for the server: start (checked synchronously, so refusals are immediate), status
snapshots with progress and a preview of the first captions, cancel, an event log for the API's
event stream. No HTTP, no torch: the model runs in a spawned caption worker (caption_worker.py).

One caption job at a time. The GPU arbiter is respected: a job that would run on the GPU
(device "cuda", or "auto" on a GPU host) is placed by jobs/caption_gpu.py: on a GPU the training
job did not reserve when there is one (the last GPU), else beside the training run only when the
captioning model's estimated need fits into what the run leaves free (refused otherwise, JobActive
naming needed vs free GiB, or which figure is unknown); the worker uses exactly that GPU (its
index, `gpu` in the snapshot). Device "cpu" runs beside training. A GPU job registers as a
resident workload of the arbiter, so a training job that starts meanwhile and needs its GPU stops
it (between images; the job ends "cancelled" with the reason) before it takes the GPU; on a GPU
the training does not reserve, or fitting beside the training's planned peak, it keeps running. A dataset a live training job uses is not captioned (edits to
it are refused meanwhile), and a run on a dataset being captioned is refused
(jobs/dataset_locks.py); a job claims its dataset for writing (jobs/dataset_claims.py), so a
CLI run or caption on the same home is refused meanwhile, and it is refused while one runs. A cancel is honoured between images; a worker that does not stop
within STOP_GRACE_S is killed, and its staged (hidden) caption file is removed: every caption
file is old or new, never half-written. A worker that stays silent past its allowance (the model
load, then each image: jobs/worker_allowance.py CaptionAllowance) is stopped as hung, SIGTERM
then SIGKILL, and the job fails naming what timed out, so it frees its claim and the GPU. Each
job is recorded in the studio home (jobs/caption_records.py: at its start, its plan, its progress
at most every 2 s, its end), so `get`, `latest` and `recent` answer after a restart too; a job
left running by a server that died reads "interrupted" with what it had done. The API creates the service on first use (from a request
thread, so the caption worker inherits the server's lowered priority: training goes first). The
queries (get, recent, latest, the folders and models in use, the event log) are jobs/caption_queries.py.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio.captioning.options import CaptionOptions, check_prompt
from lorastudio.captioning.source import CaptionerSource, resolve_captioner
from lorastudio.data import resolve_dataset_dir, safe_component
from lorastudio.data.discovery import require_folder
from lorastudio.errors import ConfigError, DatasetNotFound, FieldProblem, JobActive, NotFound
from lorastudio.event_log import EventLog
from lorastudio.jobs.caption_gpu import (
    CaptionNeed,
    Placement,
    TrainingMemory,
    caption_need,
    fits_beside,
    place_caption,
)
from lorastudio.jobs.caption_job import CaptionJob, now_iso, remove_staged
from lorastudio.jobs.caption_queries import CaptionQueries
from lorastudio.jobs.caption_records import CaptionRecorder, prune
from lorastudio.jobs.caption_worker import CAPTION_ERROR, CaptionWorkerArgs, caption_worker_main
from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
from lorastudio.jobs.dataset_locks import overlaps
from lorastudio.jobs.generation_process import Spawner, death_reason
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.worker_allowance import SCALE_SETTING, CaptionAllowance, seconds_words
from lorastudio.processes import spawn_context
from lorastudio.settings import Settings

STOP_GRACE_S = 30.0  # a cancelled worker finishes its image, then is killed
POLL_S = 0.2
MAX_EVENTS = 2000
CaptionTarget = Callable[[CaptionWorkerArgs, Any, Any], None]


def _host_device() -> str:
    from lorastudio.jobs.hardware import host_info

    return host_info().device


def _host_gpus() -> tuple[float, ...]:
    from lorastudio.jobs.hardware import host_info

    return host_info().gpu_memory_gb


def _nothing_known() -> TrainingMemory | None:
    return None


class CaptionJobs(CaptionQueries):
    """The server's caption jobs. Thread-safe. `datasets_in_use()`: folders of live training
    jobs; `training_memory()`: what the job service knows of the live training job's GPU memory
    (JobService.training_memory; None: nothing); `target` (tests), `host_device` and `gpus`
    (tests: "cuda" and the GPUs' GiB on a CPU host) and `allowance` (how long the worker may stay
    silent; default CaptionAllowance scaled by settings.worker_timeout_scale) are injectable."""

    def __init__(
        self,
        settings: Settings,
        arbiter: GpuArbiter,
        datasets_in_use: Callable[[], set[Path]] = set,
        target: CaptionTarget = caption_worker_main,
        host_device: Callable[[], str] = _host_device,
        allowance: CaptionAllowance | None = None,
        *,
        gpus: Callable[[], tuple[float, ...]] = _host_gpus,
        training_memory: Callable[[], TrainingMemory | None] = _nothing_known,
    ):
        self.settings = settings
        self.allowance = allowance or CaptionAllowance().scaled(settings.worker_timeout_scale)
        self.arbiter = arbiter
        self._in_use = datasets_in_use
        self._target = target
        self._host_device = host_device
        self._gpus = gpus
        self._training_memory = training_memory
        self._lock = threading.Lock()
        self._jobs: dict[str, CaptionJob] = {}
        self._log = EventLog(MAX_EVENTS)
        self._spawner = Spawner()  # a long-lived thread: the worker dies with the thread that started it

    def _device(self, options: CaptionOptions) -> str:
        host = self._host_device()
        if options.device == "cuda" and host != "cuda":
            raise ConfigError(
                [FieldProblem("device", "'cuda' asked but this host has no GPU; use 'cpu' or 'auto'")]
            )
        return "cpu" if options.device == "cpu" or host != "cuda" else "cuda"

    def start(self, dataset: str, options: CaptionOptions) -> dict[str, Any]:
        """Check and start captioning dataset `dataset`; returns the job's snapshot. Raises
        ConfigError / PathOutsideRoot (name, device), DatasetNotFound (no such folder),
        ModelSourceError / ModelAccessDenied / NotFound (the model), JobActive (a caption job
        runs, training uses the dataset, or training holds the GPU this job needs)."""
        safe_component(dataset, field="dataset name")
        folder = resolve_dataset_dir(dataset, self.settings.datasets_dir, allow_outside_root=False)
        if not os.path.lexists(folder):
            raise DatasetNotFound(dataset)
        require_folder(folder)
        device = self._device(options)
        source = resolve_captioner(self.settings, options.model, options.revision)
        check_prompt(source.kind, options)
        job = CaptionJob(
            uuid.uuid4().hex[:12], dataset, folder, options.model_copy(update={"device": device}), device
        )
        job.model_folder = source.folder
        holder: str | None = None
        if device == "cuda":  # outside self._lock: the job service's lock comes first
            job.need = caption_need(source)
            holder, placement = self._place(job.need)
            job.gpu, job.beside = placement.index, placement.beside
        ctx = spawn_context()
        events, job.cancel = ctx.Queue(), ctx.Event()
        with self._lock:
            busy = next((j for j in self._jobs.values() if j.status == "running"), None)
            if busy is not None:
                raise JobActive(f"caption job {busy.id} (dataset {busy.dataset!r}) is running; one at a time")
            if device == "cuda":
                self.arbiter.admit_resident(
                    self._resident(job),
                    lambda: self._yield_gpu(job),
                    lambda devices: self._stays(job, devices),
                    training=holder,
                )
            self._jobs[job.id] = job
        self._refuse_if_trained(job)  # after registering: jobs/dataset_locks.py
        try:  # other processes (a CLI train or caption on this home): jobs/dataset_claims.py
            job.claim = DatasetClaim.take(
                self.settings.home, self.settings.datasets_dir, [folder], WRITE, f"caption job {job.id}"
            )
            if not folder.is_dir():  # renamed or deleted since the check above (the claim holds it now)
                raise DatasetNotFound(dataset, "it was renamed or deleted as the caption job started")
        except BaseException:  # busy, gone, or its record not written (a full disk): the job never ran
            if job.claim is not None:
                job.claim.release()
            self._withdraw(job)
            raise
        job.recorder = CaptionRecorder(self.settings.home, "server")
        job.recorder.write(job.snapshot(), force=True)
        prune(self.settings.home)
        self._log.append({"type": "caption_job", "job_id": job.id, **job.snapshot()})
        job.thread = threading.Thread(
            target=self._run, args=(job, source, events), name=f"caption-{job.id}", daemon=True
        )
        job.thread.start()
        return job.snapshot()

    def _training(self, holder: str) -> TrainingMemory:
        """What is known of training job `holder`'s GPU memory (nothing when the job service's
        figure is of another job)."""
        known = self._training_memory()
        return known if known is not None and known.job_id == holder else TrainingMemory(holder)

    def _place(self, need: CaptionNeed) -> tuple[str | None, Placement]:
        """(the training job seen, the GPU this job runs on). Raises JobActive (caption_gpu)."""
        holder, reserved = self.arbiter.training_job, self.arbiter.reserved_devices
        training = self._training(holder) if holder is not None else None
        return holder, place_caption(self._gpus(), reserved, training, need)

    def _stays(self, job: CaptionJob, devices: tuple[int, ...]) -> bool:
        """The arbiter's question when a training job starts with GPUs `devices`: may `job` keep
        running (its GPU is not reserved, or it fits beside the run's planned peak)?"""
        if job.gpu is None or job.gpu not in devices:
            return True
        holder = self.arbiter.training_job
        gpus = self._gpus()
        if holder is None or job.need is None or job.gpu >= len(gpus):
            return False
        if fits_beside(gpus[job.gpu], job.gpu, self._training(holder), job.need) is not None:
            return False
        with self._lock:
            job.beside = holder
        return True

    def _refuse_if_trained(self, job: CaptionJob) -> None:
        """Withdraw the just-registered `job` and raise JobActive when a live training job reads
        its folder (or a folder it lies in, or one inside it)."""
        if not any(overlaps(job.folder, used) for used in self._in_use()):
            return
        self._withdraw(job)
        raise JobActive(
            f"dataset {job.dataset!r} is used by a live training job; caption it when the job ends"
        )

    def _withdraw(self, job: CaptionJob) -> None:
        """Forget the just-registered `job` that was refused (it never ran)."""
        with self._lock:
            del self._jobs[job.id]
        self.arbiter.unregister_resident(self._resident(job))

    @staticmethod
    def _resident(job: CaptionJob) -> str:
        return f"caption-{job.id}"

    def _yield_gpu(self, job: CaptionJob) -> None:
        """The arbiter's release: training starts, so this GPU job stops (and its worker exits)."""
        self._cancel(job, "a training job took the GPU")
        if job.thread is not None and job.thread is not threading.current_thread():
            job.thread.join(STOP_GRACE_S + 10)

    def _run(self, job: CaptionJob, source: CaptionerSource, events: Any) -> None:
        ctx = spawn_context()
        args = CaptionWorkerArgs(os.getpid(), str(job.folder), source, job.options, self.settings, job.gpu)
        process = ctx.Process(
            target=self._target, args=(args, events, job.cancel), name="lorastudio-caption", daemon=True
        )
        final: tuple[str, str | None] = ("failed", "the caption worker ended without a summary")
        try:
            self._spawner.run(process.start)
            final = self._pump(job, process, events)
        except (OSError, RuntimeError) as err:  # spawn failures (no memory, no free pid, ...)
            if process.pid is not None:
                raise
            final = ("failed", f"could not start the caption worker: {err}")
        finally:
            if process.pid is not None:  # started (a failed start left nothing to stop)
                if process.exitcode is None:
                    process.kill()
                process.join(10)
            remove_staged(job.folder)
            if job.claim is not None:
                job.claim.release()
            self.arbiter.unregister_resident(self._resident(job))
            with self._lock:
                job.status, job.error, job.finished_at = final[0], final[1], now_iso()
                self._log.append({"type": "caption_end", "job_id": job.id, **job.snapshot()})
                snapshot = job.snapshot()
            if job.recorder is not None:
                job.recorder.write(snapshot, force=True)

    def _pump(self, job: CaptionJob, process: Any, events: Any) -> tuple[str, str | None]:
        """Fold the worker's events into `job` until its summary or error; kill it when a cancel
        outlives STOP_GRACE_S, stop it when it stays silent past its allowance (the model load,
        then each image), notice when it dies. Returns (final status, error)."""
        deadline: float | None = None
        allowed, waiting_for = self.allowance.load_s, "load the captioning model"
        quiet_until = time.monotonic() + allowed
        while True:
            try:
                event = events.get(timeout=POLL_S)
            except queue.Empty:
                if job.cancel.is_set() and deadline is None:
                    deadline = time.monotonic() + STOP_GRACE_S
                if deadline is not None and time.monotonic() > deadline:
                    process.kill()
                    return "cancelled", None
                if not process.is_alive():
                    process.join(1)
                    return "failed", death_reason(process.exitcode).replace("generation", "caption")
                if deadline is None and time.monotonic() > quiet_until:
                    return "failed", self._stop_hung(process, waiting_for, allowed)
                continue
            done = self._fold(job, event)
            if done is not None:
                return done
            allowed, waiting_for = self.allowance.image_s, "caption an image"
            quiet_until = time.monotonic() + allowed

    def _stop_hung(self, process: Any, what: str, allowed: float) -> str:
        """Stop a silent worker, SIGTERM then SIGKILL after the kill grace; the job's error."""
        how = "SIGTERM"
        process.terminate()
        process.join(self.allowance.kill_grace_s)
        if process.exitcode is None:
            how = f"SIGKILL: SIGTERM was ignored for {self.allowance.kill_grace_s:g} s"
            process.kill()
        return (
            f"the caption worker did not {what} within {seconds_words(allowed)} and was stopped as hung"
            f" ({how}); the captions written so far are kept (on a slow machine raise {SCALE_SETTING})"
        )

    def _fold(self, job: CaptionJob, event: dict[str, Any]) -> tuple[str, str | None] | None:
        kind = event.get("type")
        with self._lock:
            job.apply(event)
            self._log.append({**event, "job_id": job.id})
            snapshot = job.snapshot()
        if job.recorder is not None:  # the plan at once, the progress at most every RECORD_EVERY_S
            job.recorder.write(snapshot, force=kind == "caption_started")
        if kind == "caption_summary":
            return ("cancelled" if event["cancelled"] else "completed"), None
        if kind == CAPTION_ERROR:
            return "failed", str(event["message"])
        return None

    def _cancel(self, job: CaptionJob, reason: str) -> None:
        with self._lock:
            if job.status != "running" or job.cancel_reason is not None:
                return
            job.cancel_reason = reason
            job.cancel.set()

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Stop a running job after its current image (captions written are kept). Returns its
        snapshot. Raises NotFound (also when it has ended)."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None or job.status != "running":
            raise NotFound(f"no running caption job with id {job_id!r}")
        self._cancel(job, "cancelled by the user")
        return self.get(job_id)

    def shutdown(self) -> None:
        """Cancel the running job, wait for it, stop the spawner thread."""
        with self._lock:
            running = [j for j in self._jobs.values() if j.status == "running"]
        for job in running:
            self._cancel(job, "the server is stopping")
        for job in running:
            if job.thread is not None:
                job.thread.join(STOP_GRACE_S + 10)
        self._spawner.close()
