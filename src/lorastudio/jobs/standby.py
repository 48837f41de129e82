"""The standby training worker: one process spawned in advance, its imports done, waiting for a job.

A fresh worker spends 5-15 s (host dependent) starting Python and importing torch, diffusers,
transformers, peft and torchao before its first model load. While the server runs, the job
service keeps ONE such process ready (`StandbyKeeper`, setting LORASTUDIO_STANDBY_WORKER):

- `standby_main` (the child): binds itself to the server's lifetime (jobs/worker.py), ignores
  the terminal's SIGINT, imports `PRELOAD` and the registered families' diffusers classes
  (families/preload.py) and waits on its pipe. It holds no GPU memory while
  it waits: an import may initialise CUDA's runtime (torchao does on a GPU host, as in a fresh
  worker), but a standby whose imports created a CUDA context exits and is not used
  (jobs/standby_cuda.py).
- The keeper's thread (alive as long as the service: the death signal fires when the thread
  that forked a child exits) spawns it, with its own event queue, stop flag and pipe, created
  for it alone; replaces one that dies while waiting (at most `MAX_DEATHS` in a row, each after
  a growing pause, then no more standbys: logged); and ends it at shutdown.
- `take()` (the dispatcher, for a one-GPU job) hands over the standby when the environment a
  fresh worker would be spawned with now (`spawn_fingerprint`: os.environ, the working
  directory, sys.path, the interpreter) is the one it was spawned with; otherwise it ends it
  and the job gets a fresh process as before. The job's (target, WorkerArgs) go over the pipe;
  the process runs the target exactly as a fresh worker would, and is never reused.
- The next standby is spawned once the job it replaces no longer starts (its first step, or its
  end): its imports do not compete with the job's loading for the host's cores.

No torch in the parent's side.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from lorastudio.families.preload import import_family_classes
from lorastudio.host_clock import host_now
from lorastudio.import_freeze import freeze_imports
from lorastudio.jobs.import_notes import held_library_warnings, say_once
from lorastudio.jobs.standby_cuda import barred_by_cuda, trace_cuda_init
from lorastudio.jobs.worker import WorkerArgs, bind_to_parent, ignore_terminal_interrupt
from lorastudio.processes import keep_working_folder, spawn_context

log = logging.getLogger("lorastudio.jobs")

# What a worker imports before its first model load, measured with -X importtime and the
# modules present at a tiny FLUX.1 run's first step: torch (through the loop), then diffusers,
# peft and transformers at the first load (~4, 4 and 1.5 s on a 2-core host); the rest is
# cheap once those are in. One that fails to import is skipped (the job reports it as today).
PRELOAD = (
    "lorastudio.training.loop",
    "diffusers",
    "transformers",
    "peft",
    "torchao",
    "diffusers.models",
    "diffusers.optimization",  # the learning-rate schedules
    "diffusers.guiders",  # imported by the pipelines' modules at a run's first load
    "transformers.modeling_utils",
    "peft.tuners.lora",
    "lorastudio.training.planning.block_swap",
    "lorastudio.training.speed.fp8",
    "lorastudio.training.planning.memory",
    "lorastudio.training.planning.quantize",
    # Inductor's compiler, which a compiled run's first block.compile(backend="inductor")
    # imports: 1.9 s on an H100 host (RESULTS note 34), 2.3 s of the denoiser's build; no
    # CUDA context
    "torch._inductor.compile_fx",
)
# then every registered family's diffusers classes: diffusers imports a pipeline's module (and
# with it every model module, the text encoders' and scipy.stats) at the first attribute access,
# which was 2.6 s of a real FLUX.1 job's time before its first load (RESULTS note 43)
FAMILY_CLASSES = "the families' diffusers classes (families/preload.py)"
MAX_DEATHS = 3  # standbys in a row that die before a job takes one, then no more
CUDA_BY_IMPORT_EXIT = 4  # a standby whose imports created a CUDA context (it says which first)
POLL_S = 0.5  # the keeper's check of its standby's liveness
ENV_SKIP = frozenset({"_"})  # variables a shell sets per command, not the worker's setting
# Variables read when used, not at import, that a standby is handed with its job (its value in
# the server now, or its absence): Inductor's cache folder, which torch sets in a process that
# asked for it (the in-process API of the tests builds tiny models) and the engine reads at its
# first compile (training/speed/compile.keep_compile_cache).
APPLIED_AT_HAND = frozenset({"TORCHINDUCTOR_CACHE_DIR"})

Fingerprint = tuple[tuple[tuple[str, str], ...], str, tuple[str, ...], str]


def spawn_fingerprint() -> Fingerprint:
    """What a spawned worker inherits from the server at its spawn and cannot change after its
    imports: the environment but APPLIED_AT_HAND (CUDA_VISIBLE_DEVICES, PYTHONPATH, LORASTUDIO_*, OMP_NUM_THREADS,
    PYTORCH_* ...; the secrets are already gone, jobs/childenv.py), the working directory,
    sys.path and the interpreter multiprocessing runs."""
    skip = ENV_SKIP | APPLIED_AT_HAND
    keep_working_folder()  # a deleted one: "/" from now on (the next spawn's)
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k not in skip))
    return env, os.getcwd(), tuple(sys.path), sys.executable


def fingerprint_change(then: Fingerprint, now: Fingerprint) -> str | None:
    """What differs between two fingerprints, in words (variable names, never values); None:
    nothing."""
    changed = sorted({k for k, _ in set(then[0]) ^ set(now[0])})
    parts = [f"environment variables {', '.join(changed)}"] if changed else []
    parts += [
        what
        for what, a, b in zip(
            ("working directory", "sys.path", "interpreter"), then[1:], now[1:], strict=True
        )
        if a != b
    ]
    return "; ".join(parts) or None


def standby_main(conn: Connection, events: Any, stop_event: Any, stop_save: Any, parent_pid: int) -> None:
    """Child entry point (multiprocessing spawn target): import, say "ready", wait for the job.
    The job arrives as (target, WorkerArgs, APPLIED_AT_HAND's values) and runs as `target(args, events, stop_event,
    stop_save)`; None or a closed pipe ends the process (exit 0)."""
    bind_to_parent(parent_pid)
    ignore_terminal_interrupt()
    started = time.monotonic()
    skipped = []
    first_init = trace_cuda_init()
    with held_library_warnings() as library_notes:  # said in the server's log, once (import_notes.py)
        for name in PRELOAD:
            first_init.importing = name
            try:
                importlib.import_module(name)
            except ImportError as err:  # an optional library missing: the job says so if it needs it
                skipped.append(f"{name} ({err})")
        first_init.importing = FAMILY_CLASSES
        skipped.extend(import_family_classes())  # diffusers' lazy pipelines and models (families/preload.py)
    first_init.restore()
    freeze_imports(collect_first=True)  # before "ready": no collection scans the libraries again
    torch = sys.modules.get("torch")
    if barred_by_cuda(torch):  # a context held while waiting (jobs/standby_cuda.py)
        with contextlib.suppress(OSError):  # the keeper logs it and spawns no more (same imports)
            conn.send({"cuda": first_init.importing_at_init or "an import", "where": first_init.where})
        print("[standby] an import created a CUDA context; this standby is not used", file=sys.stderr)
        os._exit(CUDA_BY_IMPORT_EXIT)
    # CUDA initialised by an import without a context: the state a fresh worker's imports reach
    runtime = first_init.importing_at_init if torch is not None and torch.cuda.is_initialized() else None
    # a job handed before the imports ended closed the parent's end: its args wait unread
    with contextlib.suppress(OSError):
        conn.send(
            {
                "ready": time.monotonic() - started,
                "skipped": skipped,
                "cuda_runtime": runtime,
                "library_notes": library_notes,
            }
        )
    try:
        job = conn.recv()
    except (EOFError, OSError):
        os._exit(0)
    conn.close()
    if job is None:
        os._exit(0)
    target, args, env = job
    for name, value in env.items():  # the server's values now (None: unset there)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    target(args, events, stop_event, stop_save)


class StandbyProcess:
    """The parent's handle on one standby (spawned by `spawn`, from the keeper's thread)."""

    def __init__(self, parent_pid: int) -> None:
        ctx = spawn_context()
        self.events = ctx.Queue()  # the job's, created for this process alone
        self.stop_event = ctx.Event()
        self.stop_save = ctx.Value("b", 0)
        self._conn, child_conn = ctx.Pipe(duplex=True)  # a socket pair: the args fit its buffer
        self.process = ctx.Process(
            target=standby_main,
            args=(child_conn, self.events, self.stop_event, self.stop_save, parent_pid),
            name="lorastudio-train-standby",
        )
        self._child_conn = child_conn
        self.fingerprint = spawn_fingerprint()
        self.ready_s: float | None = None  # its import time once it said ready
        self.cuda_note: str | None = None  # which import initialised CUDA, when it said so

    def spawn(self) -> int:
        """Start the process; returns its pid. Raises OSError when it cannot be spawned."""
        self.process.start()
        self._child_conn.close()
        if self.process.pid is None:
            raise OSError("the standby worker has no pid after start")
        return self.process.pid

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def alive(self) -> bool:
        """Still waiting (or importing); notes its "ready" message when one came."""
        if self.process.exitcode is not None:
            self._read_note()
            return False
        if self.ready_s is None and self.cuda_note is None:
            try:
                self._read_note()
            except (EOFError, OSError):
                return False
        return True

    def _read_note(self) -> None:
        """Its one message, when it sent it: "ready" (logged) or which import initialised CUDA."""
        with contextlib.suppress(EOFError, OSError):
            if self.ready_s is not None or self.cuda_note is not None or not self._conn.poll():
                return
            note = self._conn.recv()
            if "cuda" in note:
                where = " <- ".join(reversed(note.get("where") or []))
                self.cuda_note = f"while importing {note['cuda']}" + (f" ({where})" if where else "")
                return
            self.ready_s = float(note["ready"])
            skipped = f"; not imported: {', '.join(note['skipped'])}" if note["skipped"] else ""
            runtime = note.get("cuda_runtime")
            if runtime:
                skipped += f"; CUDA initialised (no context) while importing {runtime}"
            log.info("standby worker %s ready: its imports took %.1f s%s", self.pid, self.ready_s, skipped)
            say_once(log, self.pid, list(note.get("library_notes") or []))

    def hand(self, target: Callable[..., None], args: WorkerArgs) -> int:
        """Give the process its job; returns its pid. Raises OSError (its pipe broke: it died)."""
        pid = self.process.pid
        if pid is None or self.process.exitcode is not None:
            raise OSError("the standby worker is gone")
        env = {name: os.environ.get(name) for name in APPLIED_AT_HAND}
        self._conn.send((target, replace(args, started_at=host_now()), env))
        self._conn.close()
        return pid

    def end(self) -> None:
        """End an unused standby: terminate, then kill; reap it and free its queue and pipes. One
        whose start failed (spawn raised) has no process to end: only its queue and pipes."""
        self._conn.close()
        self._child_conn.close()  # spawn closes it once started; a failed start left it open
        started = self.process.pid is not None
        if started and self.process.exitcode is None:
            self.process.terminate()
            self.process.join(2.0)
        if started and self.process.exitcode is None:
            self.process.kill()
            self.process.join(5.0)
        self.events.close()
        self.events.cancel_join_thread()
        if self.process.exitcode is not None:
            self.process.close()


class StandbyKeeper:
    """Keeps one standby ready for the next one-GPU job (see the module docstring).
    `may_spawn()`: whether a new standby may start now (the service: no job is starting)."""

    def __init__(self, may_spawn: Callable[[], bool]) -> None:
        self._may_spawn = may_spawn
        self._lock = threading.Condition()
        self._standby: StandbyProcess | None = None
        self._closing = False
        self._deaths = 0  # in a row, before a job took one
        self._retry_at = 0.0  # monotonic: no respawn before (a pause after a death)
        self.spawned = 0  # standbys started in this keeper's life (tests, logs)
        self._thread = threading.Thread(target=self._keep, name="lorastudio-standby", daemon=True)

    def start(self) -> StandbyKeeper:
        self._thread.start()
        return self

    @property
    def current_pid(self) -> int | None:
        """The waiting standby's pid (None: none now)."""
        with self._lock:
            return self._standby.pid if self._standby is not None else None

    def take(self) -> StandbyProcess | None:
        """The waiting standby for a job that starts now, or None (none, dead, or spawned with
        another environment than a fresh worker would get now: that one is ended)."""
        with self._lock:
            standby, self._standby = self._standby, None
            self._lock.notify_all()
        if standby is None:
            return None
        if not standby.alive():
            log.warning("the standby worker (pid %s) had died; the job gets a fresh one", standby.pid)
            standby.end()
            return None
        change = fingerprint_change(standby.fingerprint, spawn_fingerprint())
        if change is not None:
            log.info("the standby worker was spawned with other %s; the job gets a fresh one", change)
            standby.end()
            return None
        with self._lock:
            self._deaths = 0
        return standby

    def shutdown(self, timeout: float = 10.0) -> None:
        """End the waiting standby (and the keeper's thread)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _keep(self) -> None:
        while True:
            dead = None
            with self._lock:  # the standby is only touched under the lock until a job takes it
                self._lock.wait(POLL_S)
                if self._closing:
                    break
                standby = self._standby
                if standby is not None and not standby.alive():
                    dead, self._standby = standby, None
            if dead is not None:
                self._replace_dead(dead)
            elif self._due(standby) and self._may_spawn():
                self._spawn()
        with self._lock:
            standby, self._standby = self._standby, None
        if standby is not None:
            standby.end()

    def _due(self, standby: StandbyProcess | None) -> bool:
        """Whether a standby should be spawned now (none waits, deaths and pause allow it)."""
        return standby is None and self._deaths < MAX_DEATHS and time.monotonic() >= self._retry_at

    def _spawn(self) -> None:
        standby = StandbyProcess(os.getpid())
        try:
            pid = standby.spawn()
        except (OSError, RuntimeError) as err:
            log.error("could not spawn a standby worker: %s", err)
            standby.end()
            self._count_death()
            return
        self.spawned += 1
        log.info("standby worker spawned (pid %d)", pid)
        with self._lock:
            if self._closing:
                self._standby = None
            else:
                self._standby = standby
                return
        standby.end()

    def _replace_dead(self, standby: StandbyProcess) -> None:
        code = standby.process.exitcode
        if code == CUDA_BY_IMPORT_EXIT and standby.cuda_note is not None:
            # the same imports would do it again: no more standbys (not three tries)
            log.error(
                "the standby worker (pid %s) found a CUDA context created by its imports (%s): it would"
                " hold a CUDA context while it waits, so no standbys on this host (jobs start a"
                " fresh worker process)",
                standby.pid,
                standby.cuda_note,
            )
            standby.end()
            with self._lock:
                self._deaths = MAX_DEATHS
            return
        log.warning(
            "the standby worker (pid %s) died while waiting (code %s); replacing it", standby.pid, code
        )
        standby.end()
        self._count_death()

    def _count_death(self) -> None:
        with self._lock:
            self._deaths += 1
            self._retry_at = time.monotonic() + 2.0 ** (self._deaths - 1)
            if self._deaths >= MAX_DEATHS:
                log.error(
                    "%d standby workers in a row died before a job took one; no more standbys"
                    " (jobs start a fresh worker process)",
                    self._deaths,
                )
