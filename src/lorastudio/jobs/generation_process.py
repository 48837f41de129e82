"""The server's handle on the generation worker process: spawn it, send it jobs, notice its death.

No torch here. The worker is spawned (spawn context) from one long-lived thread, `Spawner`: the
child arms PR_SET_PDEATHSIG (jobs/worker.bind_to_parent), which fires when the *thread* that
started it exits, so it must not be started from a request thread (those come and go). A worker
that dies during a job (kill -9, the kernel's out-of-memory killer, a segfault) or that reports
running out of memory is reported as GenerationWorkerLost; the handle is then spent and the
service starts a fresh one for the next job. A worker that stays alive but does not answer within
the allowance of what was asked (jobs/worker_allowance.py: starting, loading, generating) is
stopped as hung, SIGTERM then SIGKILL, and reported as GenerationTimedOut.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from lorastudio import errors
from lorastudio.errors import (
    ConfigError,
    DatasetError,
    FieldProblem,
    GenerationFailed,
    GenerationTimedOut,
    GenerationWorkerLost,
)
from lorastudio.jobs.generation_worker import GenerationJob, GenerationWorkerArgs, generation_worker_main
from lorastudio.jobs.worker_allowance import GenerationAllowance, timed_out_message, work_words
from lorastudio.processes import spawn_context
from lorastudio.settings import Settings

GenerationTarget = Callable[[GenerationWorkerArgs, Any], None]
Progress = Callable[[int, int], None]  # (denoising steps done, of how many; 0: not known yet)
POLL_S = 0.1  # how often a waiting request checks that the worker is alive
STOP_GRACE_S = 5.0  # after asking the worker to exit, before it is killed
UNKNOWN_STEPS = 50  # steps allowed for a job that leaves them to the family's default (fewer)


class Spawner:
    """One thread that lives as long as the generation service and starts its worker processes."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="lorastudio-generation-spawner", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (item := self._jobs.get()) is not None:
            fn, future = item
            try:
                future.set_result(fn())
            except BaseException as err:  # noqa: BLE001 - handed to the caller, which raises it
                future.set_exception(err)

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the spawner thread and return its result (its exception is raised here)."""
        future: Future[Any] = Future()
        self._jobs.put((fn, future))
        return future.result()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(5)


def death_reason(exitcode: int | None) -> str:
    """Why the worker is gone, from its exit code (negative: the signal that killed it)."""
    if exitcode is not None and exitcode < 0:
        sig = -exitcode
        name = signal.Signals(sig).name if sig in signal.valid_signals() else f"signal {sig}"
        if sig == signal.SIGKILL:
            return f"the generation worker was killed ({name}; out of memory?)"
        if sig == signal.SIGSEGV:
            return f"the generation worker crashed ({name})"
        return f"the generation worker was killed ({name})"
    return f"the generation worker exited unexpectedly (code {exitcode})"


def rebuild_error(kind: str, message: str, problems: list[tuple[str, str]]) -> errors.LorastudioError:
    """The domain error the worker reported, as an exception of the same class where it can be
    rebuilt from its message (else GenerationFailed with the message)."""
    if kind == "ConfigError":
        return ConfigError([FieldProblem(f, m) for f, m in problems])
    if kind == "DatasetError":
        return DatasetError(message.split("\n", 1)[0], [m for _, m in problems])
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.LorastudioError):
        if cls.__init__ is Exception.__init__:  # constructed from its message alone
            return cls(message)
        if issubclass(cls, errors.ModelSourceError):
            return errors.ModelSourceError(message)
        if issubclass(cls, errors.NoSpaceLeft):  # the gallery's disk is full: 507, not a failure
            return errors.NoSpaceLeft.from_message(message)
        if issubclass(cls, errors.WriteFailed):  # the gallery could not be written: named, not "failed"
            return errors.WriteFailed.from_message(message)
    return GenerationFailed(message)


class GenerationProcess:
    """One spawned generation worker. `start()`, then `call(job)` any number of times, `stop()`."""

    def __init__(
        self,
        spawner: Spawner,
        target: GenerationTarget = generation_worker_main,
        settings: Settings | None = None,
        allowance: GenerationAllowance | None = None,
    ):
        """`allowance`: how long each phase may take before the worker counts as hung (default:
        GenerationAllowance() scaled by settings.worker_timeout_scale)."""
        if allowance is None:
            scale = settings.worker_timeout_scale if settings is not None else 1.0
            allowance = GenerationAllowance().scaled(scale)
        self.allowance = allowance
        ctx = spawn_context()
        self._conn, child_conn = ctx.Pipe(duplex=True)
        self._child_conn = child_conn
        self._cancel = ctx.Event()  # set: the job in flight stops (generation_worker's protocol)
        self.process = ctx.Process(
            target=target,
            args=(
                GenerationWorkerArgs(parent_pid=os.getpid(), settings=settings, cancel=self._cancel),
                child_conn,
            ),
            name="lorastudio-generate",
            daemon=True,
        )
        self._spawner = spawner
        self._pid: int | None = None
        self.spent = False  # True once the worker died or was stopped: never used again

    @property
    def pid(self) -> int | None:
        """The child's pid once started (kept after it exited)."""
        return self._pid

    def start(self) -> int:
        """Spawn the child (from the spawner thread) and wait for its "ready"; returns its pid.
        Raises GenerationWorkerLost when it dies before that, GenerationTimedOut when it stays
        silent past the allowance (it is then stopped)."""
        self._spawner.run(self.process.start)
        self._pid = self.process.pid
        self._child_conn.close()  # the child holds its own copy: EOF here once it dies
        reply = self._receive(self.allowance.ready_s, "say it is ready")
        if not (isinstance(reply, tuple) and reply[:1] == ("ready",)):
            self.stop()
            raise GenerationWorkerLost(f"the generation worker sent {reply!r} instead of ready")
        return int(reply[1])

    def call(self, job: GenerationJob, progress: Progress | None = None) -> dict[str, Any]:
        """Run `job` in the worker; returns its "ok" fields (width, height, seconds, loaded).
        `progress(done, of)` is told once the pipeline is ready (0 of the steps asked) and after
        each denoising step the worker reports (its allowance runs on: a step resets no clock).
        Raises the domain error it reported, GenerationFailed (an unexpected pipeline error),
        GenerationWorkerLost (it died or ran out of memory) or GenerationTimedOut (it did not load
        or generate within the allowance and was stopped); after the last two this handle is spent.
        GenerationCancelled when `cancel()` stopped it (the worker goes on); `clear_cancel()`
        before it, so that a cancel of an earlier job is not this one's."""
        try:
            self._conn.send(job)
        except (OSError, ValueError) as err:  # the pipe is broken: the child is gone
            self._lost(f"{death_reason(self._reap())}: {err}")
        reply = self._receive(self.allowance.load_s, "load the model")
        if isinstance(reply, tuple) and reply[:1] == ("loaded",):  # the pipeline is ready: the work's clock
            steps = job.steps or UNKNOWN_STEPS
            allowed = self.allowance.work_s(steps, job.width, job.height)
            deadline = time.monotonic() + allowed
            if progress is not None:
                progress(0, job.steps or 0)
            while True:
                reply = self._receive(allowed, f"finish {work_words(steps, job.width, job.height)}", deadline)
                if not (isinstance(reply, tuple) and len(reply) == 3 and reply[0] == "step"):
                    break
                if progress is not None:
                    progress(int(reply[1]), int(reply[2]))
        status = reply[0] if isinstance(reply, tuple) and reply else None
        if status == "ok":
            return dict(reply[1])
        if status == "error":
            raise rebuild_error(reply[1], reply[2], list(reply[3]))
        if status == "failed":
            raise GenerationFailed(f"generation failed: {reply[1]}")
        if status == "oom":
            self._reap()
            self._lost(
                f"the generation worker ran out of memory ({reply[1]}); try a smaller size or fewer steps"
            )
        self.stop()
        raise GenerationFailed(f"the generation worker sent an unexpected reply {reply!r}")

    def cancel(self) -> None:
        """Stop the job in flight during its load before the next component or LoRA, before
        its first denoising step or after the step it is in (its `call` raises
        GenerationCancelled); from any thread. Set between jobs, it stops
        the next one unless `clear_cancel()` comes first."""
        self._cancel.set()

    def clear_cancel(self) -> None:
        """Forget a cancel: the next job runs (called before each `call`)."""
        self._cancel.clear()

    def _receive(self, allowed_s: float, what: str, deadline: float | None = None) -> Any:
        """The next message from the child, checking every POLL_S that it is alive. Raises
        GenerationWorkerLost when it died, GenerationTimedOut (after stopping it) when it did
        not answer within `allowed_s` (`what` it was to do, for the message) or by `deadline`
        (time.monotonic(): the allowance of a phase whose progress messages came before)."""
        if deadline is None:
            deadline = time.monotonic() + allowed_s
        while True:
            try:
                if self._conn.poll(POLL_S):
                    return self._conn.recv()
            except (EOFError, OSError):  # the child's end closed: it died
                self._lost(death_reason(self._reap()))
            if not self.process.is_alive():
                if self._conn.poll(0):  # it may have answered just before it exited
                    continue
                self._lost(death_reason(self._reap()))
            if time.monotonic() > deadline:
                how = self._stop_hung()
                raise GenerationTimedOut(timed_out_message(what, allowed_s, how))

    def _reap(self, timeout: float = 2.0) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def _lost(self, message: str) -> None:
        self.stop()
        raise GenerationWorkerLost(message)

    def kill(self) -> None:
        """SIGKILL the child now (from any thread); a request waiting on it then fails."""
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.kill(self._pid, signal.SIGKILL)

    def _stop_hung(self) -> str:
        """Stop a worker that does not answer: SIGTERM, then SIGKILL after the kill grace (a
        hung worker cannot read an exit request). Returns how it ended, for the message."""
        self.spent = True
        how = "SIGTERM"
        if self.process.exitcode is None:
            self.process.terminate()
            self.process.join(self.allowance.kill_grace_s)
            if self.process.exitcode is None:
                how = f"SIGKILL: SIGTERM was ignored for {self.allowance.kill_grace_s:g} s"
                self.process.kill()
                self.process.join(5)
        self._conn.close()
        if self.process.exitcode is not None:
            self.process.close()
        return how

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Ask the worker to exit, then kill it if it has not after `grace` s. Idempotent."""
        if self.spent:
            return
        self.spent = True
        if self.process.exitcode is None and self.process.pid is not None:
            with contextlib.suppress(OSError, ValueError):  # a broken pipe: the child is exiting
                self._conn.send(None)
            self.process.join(grace)
            if self.process.exitcode is None:
                self.process.kill()
                self.process.join(5)
        self._conn.close()
        if self.process.exitcode is not None:
            self.process.close()
