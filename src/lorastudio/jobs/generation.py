"""Generation for the server: check a request, run it in the generation worker, keep the gallery.

The pipeline never runs in the server process: it lives in a supervised worker subprocess
(jobs/generation_worker.py, spawned and watched by jobs/generation_process.py) that keeps it
loaded between requests and reloads it when the base model changes. The worker is a resident
workload of the GPU arbiter: generation is refused (JobActive) while training runs, and
starting training stops the worker, which frees its memory. A worker that dies during a request
(killed by the out-of-memory killer, kill -9, a crash) or runs out of memory is reported as
GenerationWorkerLost (HTTP 503), one that hangs past the allowance of what was asked
(jobs/worker_allowance.py) is stopped and reported as GenerationTimedOut (504); the next
request starts a fresh one; the server goes on. A request can be cancelled by its id
(`cancel`: the API's cancel route, or the client leaving): waiting for the worker it ends at
once, running it stops during its pipeline's load before the next component or LoRA (what that
load had loaded is freed), before its first denoising step or between two (the worker goes on,
a pipeline it had loaded whole resident), finished but not yet kept its image is dropped: GenerationCancelled, and
nothing of it in the gallery. A request's id names it alone: once it ended the id is retired for
RETIRED_FOR_S (a cancel of it answers NotFound, a new request with it JobActive naming why), so
a late cancel never reaches another request reusing the id.

Every request is checked here, before any work, with every problem reported at once: the family,
the revision, the size and steps against the budget below, the LoRA files (their headers are read with a
size cap and checked, lora/header.py; each file's sha256 taken, lora/file_digest.py: recorded in
the image's settings, and the worker applies a file only while it is still those bytes) and the
base model. Images go to the gallery (settings.home/gallery): the worker writes the PNG under a hidden staging name, the server
writes the sidecar, then renames the PNG into place. No torch here.

The budget (per request) is generation_rules.budget_problems, the CLI's too; the check itself is
jobs/generation_check.py. What a request is
(its LoRA choices, the gallery settings of its image, the LoRA file a choice names) is
jobs/generation_inputs.py. The bookkeeping of requests in flight (ids, owners, cancel, the MAX_IN_FLIGHT cap, each one's
phase and denoising step) is jobs/generation_requests.py; the asynchronous form (POST answers 202,
the client polls: a generation that outlives a proxy's read timeout) is jobs/generation_jobs.py
(`jobs`), which admits and checks a request here (`prepare`) and runs it (`run_admitted`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lorastudio import families
from lorastudio.basemodels import ResolvedBase
from lorastudio.data.writes import staged_write
from lorastudio.errors import GenerationCancelled, GenerationWorkerLost, ServerStopping, writing
from lorastudio.jobs.gallery import gallery_dir, new_image_name
from lorastudio.jobs.generation_base import base_identity, job_at_base, refuse_if_base_gone
from lorastudio.jobs.generation_check import check_request, planned_steps
from lorastudio.jobs.generation_inputs import GenerationRequest, meta_of
from lorastudio.jobs.generation_jobs import GenerationJobs
from lorastudio.jobs.generation_process import GenerationProcess, GenerationTarget, Spawner
from lorastudio.jobs.generation_requests import InFlight
from lorastudio.jobs.generation_worker import GenerationJob, generation_worker_main
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.references import used_references
from lorastudio.jobs.worker_allowance import GenerationAllowance
from lorastudio.lora.dora_rule import untold_warnings
from lorastudio.settings import Settings

RESIDENT_NAME = "generation"
LOCK_POLL_S = 0.1  # how often a request waiting for the worker looks for its cancel
STOPPING = "the server is stopping: this generation was stopped and nothing of it kept; send it again once the server is back"


@contextlib.contextmanager
def _no_space_as(folder: Path, what: str) -> Iterator[None]:
    """Raise NoSpaceLeft (HTTP 507) for a full disk, WriteFailed (500) for the file-size limit or
    a read-only folder, naming `what` and `folder` (errors.writing)."""
    with writing(what, folder):
        yield


class GenerationService:
    """Checks requests and runs them in the one generation worker; thread-safe.

    `worker_target` is the worker's entry point (tests wrap it to inject faults); `allowance`
    how long the worker may take before it counts as hung (default: jobs/worker_allowance.py
    scaled by settings.worker_timeout_scale)."""

    def __init__(
        self,
        settings: Settings,
        arbiter: GpuArbiter,
        worker_target: GenerationTarget = generation_worker_main,
        allowance: GenerationAllowance | None = None,
    ):
        self.settings = settings
        self.arbiter = arbiter
        self._target = worker_target
        self._allowance = allowance or GenerationAllowance().scaled(settings.worker_timeout_scale)
        self._lock = threading.Lock()
        self._turns = threading.Condition()  # requests waiting for the worker, first come first served
        self._queue: collections.deque[object] = collections.deque()
        self._spawner = Spawner()  # started here: the server's long-lived thread, not a request's
        self._process: GenerationProcess | None = None
        self._key: tuple[Any, ...] | None = None
        self._flight = InFlight()  # requests in flight (waiting, running or saving)
        self._bases: dict[str, tuple[str, ...]] = {}  # request id -> its base's source and config
        self._bases_lock = threading.RLock()  # held by a model delete across its check (bases_held)
        self._stopping = False  # the server is stopping: `stopping`
        self.jobs = GenerationJobs(self)  # the asynchronous form's requests (POST /api/generations)
        arbiter.register_resident(RESIDENT_NAME, self.release)

    @property
    def loaded(self) -> tuple[str, str, str | None] | None:
        """(base model source, family, revision) of the worker's resident pipeline, or None."""
        return None if self._key is None else self._key[:3]

    @property
    def worker_pid(self) -> int | None:
        """The pid of the live generation worker, or None."""
        process = self._process
        return process.pid if process is not None and not process.spent else None

    @property
    def in_flight(self) -> int:
        """How many generation requests are in flight (waiting for the worker or running)."""
        return len(self._flight)

    @property
    def waiting(self) -> int:
        """How many requests wait for the worker (in the queue, first come first served)."""
        with self._turns:
            return len(self._queue)

    def stopping(self) -> int:
        """The server began to stop (its signal handler calls this, before uvicorn's graceful
        wait for open requests): every request in flight is cancelled (a running one stops
        after its current denoising step or component, one waiting ends now) and answers
        ServerStopping (503) within that wait, nothing of it kept; a new request is refused the
        same way. Returns how many were in flight. Idempotent."""
        self._stopping = True
        return self._flight.cancel_all()

    def release(self) -> None:
        """Stop the worker, freeing its pipeline and memory (the GPU for training). Idempotent."""
        with self._lock:
            self._stop_locked()

    def shutdown(self) -> None:
        """Stop the worker and the spawner thread (the server is stopping). A generation in
        flight is not waited for: its worker is killed (that request fails)."""
        process = self._process
        if not self._lock.acquire(timeout=1.0):
            if process is not None:
                process.kill()
            self._lock.acquire()
        try:
            self._stop_locked()
        finally:
            self._lock.release()
        self.jobs.shutdown()
        self._spawner.close()

    def _stop_locked(self) -> None:
        if self._process is not None:
            self._process.stop()
        self._process = None
        self._key = None

    def check(self, req: GenerationRequest) -> tuple[ResolvedBase, list[tuple[str, float]], tuple[str, ...]]:
        """Check everything about `req` before any work: returns (the resolved base model,
        [(LoRA file, scale)], each LoRA file's sha256). Raises UnknownFamily, ConfigError
        (revision, size budget, a LoRA file that is not a LoRA of this family or not the file
        of the sha256 asked for, the base model: every problem at once), NotFound (a LoRA
        name)."""
        return check_request(self.settings, req)

    def cancel(self, request_id: str, owner: object | None = None) -> str:
        """Cancel the generation `request_id` in flight: "waiting" (for the worker: it ends
        now) or "running" (it stops during the load before the next component or LoRA, before
        its first denoising step or after the one it is in); either way its `generate` raises GenerationCancelled and nothing is kept. A second
        cancel answers the same. Raises NotFound when no such request is in flight (unknown,
        or already ended: one whose image is being saved has ended, it is kept whole; an ended
        one's id is retired, so this cancel never reaches a later request of it). With an
        `owner`, only a request that `generate` was given that owner is cancelled (the route's
        watcher of a client that left: never another client's request of the same id)."""
        return self._flight.cancel(request_id, owner)

    def generate(
        self, req: GenerationRequest, request_id: str | None = None, owner: object | None = None
    ) -> dict[str, Any]:
        """Generate one image and save it to the gallery with a JSON sidecar of its settings.
        Returns the sidecar's fields (its "warnings" among them: the LoRA files' warnings,
        lora/dora_rule.untold_warnings) plus {"file", "path", "seconds"}. `request_id` names the request for `cancel`
        (None: not cancellable), `owner` (any object) who may cancel it by owner. Raises what
        `check` raises, JobActive
        (training holds the GPU, a request of this id is in flight or ended less than
        RETIRED_FOR_S ago, or MAX_IN_FLIGHT requests are), GenerationCancelled
        (`cancel`: no image kept), GenerationFailed / GenerationWorkerLost / GenerationTimedOut
        (the worker failed / died / hung: the next request starts a fresh worker)."""
        rid = request_id if request_id is not None else f"unnamed-{uuid.uuid4().hex}"
        self.admit(rid, owner)
        return self.run_admitted(req, rid)

    def admit(self, rid: str, owner: object | None = None) -> None:
        """Take request `rid` in flight (queued for the worker) before any work: `run_admitted`
        must follow, which ends it whichever way. Raises ServerStopping, JobActive (a request of
        this id is in flight or ended less than RETIRED_FOR_S ago, or MAX_IN_FLIGHT are)."""
        if self._stopping:
            raise ServerStopping(STOPPING)
        self._flight.admit(rid, owner)

    def prepare(
        self, req: GenerationRequest, rid: str
    ) -> tuple[ResolvedBase, list[tuple[str, float]], tuple[str, ...]]:
        """The asynchronous form's admission (jobs/generation_jobs.py): `admit` request `rid`,
        `check` it and refuse it while training holds the GPU (JobActive, the synchronous form's
        words), all before any work; returns what `check` returned, for `run_admitted`, which
        must follow. When any of it raises, `rid` has ended (its id retired)."""
        self.admit(rid)
        try:
            checked = self.check(req)
            with self.arbiter.generation():  # training holds the GPU: refused now, not after a 202
                pass
            self._flight.plan(rid, planned_steps(req, checked[0]))  # its record says them from the start
        except BaseException:
            self._flight.finish(rid)
            raise
        return checked

    def abandon(self, rid: str) -> None:
        """End request `rid`, prepared (`prepare`) but never run (its id retired)."""
        self._flight.finish(rid)

    def run_admitted(
        self,
        req: GenerationRequest,
        rid: str,
        checked: tuple[ResolvedBase, list[tuple[str, float]], tuple[str, ...]] | None = None,
        last: Callable[[tuple[str, int, int]], None] | None = None,
    ) -> dict[str, Any]:
        """`generate` of request `rid`, admitted (`admit`); `checked`: what `check(req)` returned
        for it (None: checked here); `last` is told its last `progress` as it ends. Its id is
        retired when it ends, whichever way."""
        try:
            if self._stopping:  # began between the check in admit and its admission: cancel_all missed it
                raise ServerStopping(STOPPING)
            return self._generate(req, rid, checked)
        except GenerationCancelled as err:
            if self._stopping:
                raise ServerStopping(STOPPING) from err
            raise
        finally:
            if last is not None and (phase := self._flight.progress(rid)) is not None:
                last(phase)
            self._flight.finish(rid)
            with self._bases_lock:
                self._bases.pop(rid, None)

    def models_in_use(self) -> set[Path]:
        """The local base-model folders and files (and a single file's base config folder) of
        the requests in flight: not to be deleted under them (DELETE /api/models answers 409)."""
        with self._bases_lock:
            used = [p for paths in self._bases.values() for p in paths]
        return {Path(p) for p in used if Path(p).is_absolute()}

    def bases_held(self) -> contextlib.AbstractContextManager[Any]:
        """No request takes a base model while held: a model delete checks `models_in_use` and
        moves the folder under it, so a generation is either seen using it or sees it gone."""
        return self._bases_lock

    def progress(self, rid: str) -> tuple[str, int, int] | None:
        """(phase, denoising steps done, of how many) of request `rid` in flight, or None
        (generation_requests.InFlight.progress)."""
        return self._flight.progress(rid)

    def _generate(
        self,
        req: GenerationRequest,
        rid: str,
        checked: tuple[ResolvedBase, list[tuple[str, float]], tuple[str, ...]] | None,
    ) -> dict[str, Any]:
        base, loras, digests = checked if checked is not None else self.check(req)
        warnings = untold_warnings(Path(p) for p, _ in loras)  # a DoRA read by a guessed rule
        self._flight.plan(rid, planned_steps(req, base))  # its progress says them before the worker does
        with self._bases_lock:
            refuse_if_base_gone(base)  # a model delete landed since the check
            self._bases[rid] = tuple(p for p in (base.source, base.config) if p)
        spec = families.get(req.family).spec
        family = spec.name
        out_dir = gallery_dir(self.settings)
        with _no_space_as(out_dir, "the gallery folder could not be made"):
            out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / new_image_name(self.settings, req.seed)
        staging = target.with_name(f".{target.name}.partial")
        job = GenerationJob(
            source=base.source,
            base_config=base.config,
            v_prediction=req.v_prediction,
            family=family,
            revision=req.revision,
            prompt=req.prompt,
            seed=req.seed,
            steps=req.steps,
            width=req.width,
            height=req.height,
            guidance=req.guidance,
            negative_prompt=req.negative_prompt or None,
            max_sequence_length=req.max_sequence_length,
            control_resolution=req.control_resolution,
            loras=tuple(loras),
            lora_digests=digests,
            references=used_references(self.settings, req.references),  # pruned since: ConfigError
            out_path=str(staging),
        )
        try:
            with self.arbiter.generation(), self._worker_lock(rid):  # the base now, not before the wait:
                job, identity = job_at_base(
                    job, req, base, spec.denoiser, lambda b: meta_of(req, family, digests, b)
                )
                result = self._run_locked(job, rid)
            self._flight.saving(rid)
            if identity is None:  # a hub base the worker fetched: its files are here now
                identity = base_identity(base, spec.denoiser, req.revision)
            meta = {
                **meta_of(req, family, digests, identity),
                "width": result["width"],
                "height": result["height"],
                # the request it answers, read back after a restart that lost its "done" record
                # (jobs/generation_recover.py); its seconds, for that answer
                "request_id": rid,
                "seconds": round(result["seconds"], 3),
                "warnings": warnings,  # and its warnings, which that answer lost before (RELIABILITY 2211)
            }
            # The sidecar first, the image last: a listed PNG always has its complete sidecar.
            try:
                with _no_space_as(out_dir, "the image's settings could not be written to the gallery"):
                    with staged_write(target.with_suffix(".json")) as tmp:
                        tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
                    os.replace(staging, target)
            except BaseException:
                if not target.exists():  # no image: no sidecar of it either (its name is this request's)
                    target.with_suffix(".json").unlink(missing_ok=True)
                raise
        finally:
            staging.unlink(missing_ok=True)
        answer = {"file": target.name, "path": str(target), "seconds": round(result["seconds"], 3)}
        return {**meta, **answer}

    @contextlib.contextmanager
    def _worker_lock(self, rid: str) -> Iterator[None]:
        """Hold the worker for request `rid`, in the order the requests came (first come, first
        served: a bare lock let a request wait while dozens that came after it ran); raises
        GenerationCancelled when it is cancelled while it waits (it leaves the queue)."""
        ticket = object()
        with self._turns:
            self._queue.append(ticket)
        try:
            with self._turns:
                while self._queue[0] is not ticket:
                    if self._flight.cancelled(rid):
                        raise GenerationCancelled("generation cancelled while it waited for the worker")
                    self._turns.wait(LOCK_POLL_S)
            while not self._lock.acquire(timeout=LOCK_POLL_S):  # its turn: the running one ends
                if self._flight.cancelled(rid):
                    raise GenerationCancelled("generation cancelled while it waited for the worker")
        finally:
            with self._turns:
                self._queue.remove(ticket)
                self._turns.notify_all()
        try:
            yield
        finally:
            self._lock.release()

    def _run_locked(self, job: GenerationJob, rid: str) -> dict[str, Any]:
        """Run `job` (request `rid`) in the worker (started if there is none); forget a worker
        that died. Raises GenerationCancelled when `rid` was cancelled before the job was sent."""
        if self._flight.cancelled(rid):  # before a worker is started for it
            raise GenerationCancelled("generation cancelled before it started")
        if self._process is None or self._process.spent:
            self._key = None
            process = GenerationProcess(self._spawner, self._target, self.settings, self._allowance)
            self._process = process
            try:
                process.start()
            except (OSError, RuntimeError) as err:  # the spawn failed (no memory, no free pid, ...)
                self._process = None  # the next request spawns afresh
                if process.pid is not None:
                    process.stop()
                raise GenerationWorkerLost(
                    f"could not start the generation worker: {err}; try again"
                ) from err
        self._flight.start_running(rid, self._process)  # a cancel from now on reaches the worker
        self._key = None  # unknown while the job runs (and after it failed)
        try:
            result = self._process.call(job, lambda done, of: self._flight.stepped(rid, done, of))
        finally:
            self._flight.stop_running()
            if self._process.spent:  # died or ran out of memory: the next job gets a fresh one
                self._process = None
        self._key = job.key
        return result
