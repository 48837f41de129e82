"""The parent's handle on one worker process: spawn it, read its events, stop it.

Each worker gets its own event queue and stop flag: a killed child can leave a shared queue's
lock held forever, so nothing is reused across workers. No torch here.

A one-GPU job may be handed a standby worker instead (jobs/standby.py: a process spawned in
advance, its imports done, with a queue and stop flag of its own as well); from then on it is
the job's process like a fresh one.

`JobWorker` is what the job service needs of a worker; `WorkerProcess` (one spawned process,
single-GPU jobs) and `jobs.launcher.TorchrunWorker` (a torchrun launch, num_gpus > 1) have it.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lorastudio.config import TrainConfig
from lorastudio.jobs.standby import StandbyProcess
from lorastudio.jobs.step_watch import HANG_MIN_S, HANG_STEP_FACTOR
from lorastudio.jobs.worker import WorkerArgs, worker_main
from lorastudio.processes import spawn_context
from lorastudio.settings import Settings

# (generation, pid, event dict) as sent by the worker
TaggedEvent = tuple[int, int, dict[str, Any]]
WorkerTarget = Callable[[WorkerArgs, Any, Any, Any], None]


@dataclass(frozen=True)
class Timeouts:
    """stop_grace_s: after a stop request, or after the end of the work in flight it waits for
    (a sample round, a checkpoint: jobs/busy.py), how long the worker may take before it is
    terminated; busy_grace_s: the most a stop waits while such work is in flight;
    kill_grace_s: after terminate, before kill; exit_grace_s: after its terminal event, how long
    it may take to exit; hang_min_s, hang_step_factor: the step loop's silence allowance, at
    least hang_min_s and hang_step_factor x its slowest step (jobs/step_watch.py)."""

    stop_grace_s: float = 30.0
    busy_grace_s: float = 900.0
    kill_grace_s: float = 5.0
    exit_grace_s: float = 30.0
    hang_min_s: float = HANG_MIN_S  # the step loop's silence allowance (jobs/step_watch.py)
    hang_step_factor: float = HANG_STEP_FACTOR


class JobWorker(Protocol):
    """A running training job as the job service sees it (see WorkerProcess for each method)."""

    generation: int

    def start(self) -> int: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def exitcode(self) -> int | None: ...
    def next_event(self, timeout: float) -> TaggedEvent | None: ...
    def request_stop(self, save: bool) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def escalate(self, timeouts: Timeouts, stop_deadline: float | None, ended_at: float | None) -> None: ...
    def join(self, timeout: float) -> bool: ...
    def failure_reason(self) -> str: ...
    def silence_note(self, silent_s: float) -> str | None: ...
    def close(self) -> None: ...


def escalate(
    worker: JobWorker, timeouts: Timeouts, stop_deadline: float | None, ended_at: float | None
) -> None:
    """Terminate, then kill, a worker that overstays its stop request (monotonic deadline
    `stop_deadline`, jobs/busy.py stop_deadline) or its terminal event (`ended_at`); None: no
    such moment yet."""
    deadlines = []
    if stop_deadline is not None:
        deadlines.append(stop_deadline)
    if ended_at is not None:
        deadlines.append(ended_at + timeouts.exit_grace_s)
    if not deadlines:
        return
    now, deadline = time.monotonic(), min(deadlines)
    if now >= deadline + timeouts.kill_grace_s:
        worker.kill()
    elif now >= deadline:
        worker.terminate()


class WorkerProcess:
    """One spawned training worker. Create, `start()`, read with `next_event`, then `close()`."""

    def __init__(
        self,
        job_id: str,
        generation: int,
        config: TrainConfig,
        settings: Settings,
        target: WorkerTarget = worker_main,
        resume: Path | None = None,
        standby: StandbyProcess | None = None,
    ):
        """resume: the checkpoint folder a resumed run continues from (None: a fresh run);
        standby: a waiting standby worker (jobs/standby.py) that `start()` hands the job to, its
        queue and stop flag this worker's (None: `start()` spawns a fresh process)."""
        self.generation = generation
        self._standby = standby
        self._target = target
        args = WorkerArgs(
            job_id=job_id,
            generation=generation,
            config=config,
            settings=settings.model_copy(update={"api_token": None}),
            parent_pid=os.getpid(),
            resume=str(resume) if resume is not None else None,
        )
        self._args = args
        if standby is not None:
            self.events, self._stop_event, self._stop_save = (
                standby.events,
                standby.stop_event,
                standby.stop_save,
            )
            self.process = standby.process
            return
        ctx = spawn_context()
        self.events = ctx.Queue()
        self._stop_event = ctx.Event()
        self._stop_save = ctx.Value("b", 0)
        self.process = ctx.Process(
            target=target,
            args=(args, self.events, self._stop_event, self._stop_save),
            name=f"lorastudio-train-{job_id}",
        )

    def start(self) -> int:
        """Spawn the child (or hand the job to the standby); returns its pid. Raises OSError if
        it cannot be spawned (the standby: it died before it got the job)."""
        if self._standby is not None:
            return self._standby.hand(self._target, self._args)
        self.process.start()
        pid = self.process.pid
        if pid is None:
            raise OSError("the worker process has no pid after start")
        return pid

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def exitcode(self) -> int | None:
        """None while running; the exit code (negative: killed by that signal) once it ended."""
        return self.process.exitcode

    def next_event(self, timeout: float) -> TaggedEvent | None:
        """The next event the worker sent, or None after `timeout` seconds without one."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        except (EOFError, OSError):  # the pipe broke: the child died mid-write
            return None

    def request_stop(self, save: bool) -> None:
        """Ask the worker to stop at its next check (cooperative)."""
        self._stop_save.value = 1 if save else 0
        self._stop_event.set()

    def terminate(self) -> None:
        if self.process.exitcode is None:
            self.process.terminate()

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()

    def escalate(self, timeouts: Timeouts, stop_deadline: float | None, ended_at: float | None) -> None:
        """Terminate, then kill, a worker that overstays its stop deadline or its terminal
        event (`ended_at`); None: no such moment yet."""
        escalate(self, timeouts, stop_deadline, ended_at)

    def silence_note(self, silent_s: float) -> str | None:
        """Which processes of the job went silent (a data-parallel job's ranks: jobs/launcher.py);
        None: one process, the worker the hang message names."""
        return None

    def failure_reason(self) -> str:
        """Why the job failed when the process ended without a terminal event."""
        return f"worker exited unexpectedly (code {self.exitcode})"

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the child to exit; True if it has."""
        self.process.join(timeout)
        return self.process.exitcode is not None

    def close(self) -> None:
        """Release the queue and process resources (the child must have exited)."""
        self.events.close()
        self.events.cancel_join_thread()
        if self.process.exitcode is not None:
            self.process.close()
