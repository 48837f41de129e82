"""The hang watch of a one-process `lorastudio train` (no torch): the job service's step watch of
its one worker (jobs/step_watch.py, jobs/pump.py `_stop_hung`) in a thread of the run's own
process, as cli/launch_hang.py watches a `--gpus N` launch from the launching command.

The run's events and stop polls feed a StepWatch (the busy messages of jobs/busy.py announce the
work it does not time: a sample or validation round, a checkpoint, the final save; nothing
before the first step is timed: loading, the caches, compile, the first step). A step loop
silent past the allowance (at least HANG_MIN_S x LORASTUDIO_WORKER_TIMEOUT_SCALE, HANG_STEP_FACTOR
x the slowest step) is stopped as the service stops a hung worker:

- a stop-and-save is asked for (the run's next stop poll takes it, as a Ctrl-C's): a step that
  was only slow saves the LoRA and the run ends "stopped" with the reason as its note, and the
  command exits 1 saying why (`answered`);
- past the stop path's deadline (jobs/busy.stop_deadline, then kill_grace_s: the terminate and
  the kill of a worker process in one, since the hung thread is this process's own), the run is
  recorded "failed" with the service's words ("it did not answer the stop and was terminated; no
  LoRA was saved"), what a fresh run without a checkpoint wrote is removed (its checkpoints are
  kept), the one-line error is printed and the process ends with status 1 at once (os._exit: the
  hung main thread never returns to run the command's own clean-up).

What it cannot catch (RELIABILITY 986): a hang that holds Python's GIL (a native call that never
releases it) stops this thread too, and a stopped process (SIGSTOP, Ctrl-Z) runs no thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from lorastudio.jobs.busy import BusyTracker, stop_deadline
from lorastudio.jobs.launch_watch import WatchedRun
from lorastudio.jobs.process import Timeouts
from lorastudio.jobs.step_watch import HANG_MIN_S, StepWatch
from lorastudio.training.events import Event, Progress, StopRequest

POLL_S = 0.25
StopCheck = Callable[[], StopRequest | None]
Emit = Callable[[Event], None]
EXIT_HUNG = 1


def watch_timeouts() -> Timeouts:
    """The job service's timeouts of a job (jobs/service.py): its hang allowance scaled by
    worker_timeout_scale (LORASTUDIO_WORKER_TIMEOUT_SCALE). Tests replace it."""
    from lorastudio.settings import get_settings

    return Timeouts(hang_min_s=HANG_MIN_S * get_settings().worker_timeout_scale)


class SelfWatch:
    """The step watch of the run in this process. `wrap_emit` / `wrap_check` around the run's
    sink and stop check, `start()`, then `close()` when `train()` returned; `reason` says why it
    asked for the stop (None: it did not)."""

    def __init__(
        self,
        config: Any,
        run_id: str | None,
        run_dir: Path | None,
        console: Console,
        timeouts: Timeouts | None = None,
        end: Callable[[int], None] = os._exit,
    ):
        self.timeouts = timeouts or watch_timeouts()
        self.watch = StepWatch(self.timeouts.hang_min_s, self.timeouts.hang_step_factor)
        self.run = WatchedRun()
        self.reason: str | None = None
        self._busy = BusyTracker(config)
        self._run_id, self._run_dir, self._console, self._end = run_id, run_dir, console, end
        self._lock = threading.Lock()
        self._stop_at: float | None = None
        self._closed = threading.Event()

    def _saw(self, data: dict[str, Any] | None) -> None:
        if data is None:
            return
        now = time.monotonic()
        with self._lock:
            self.watch.saw(data, now)
            self.run.fold(data, now)

    def wrap_emit(self, emit: Emit) -> Emit:
        def watched(event: Event) -> None:
            self._saw({"type": event.type, "step": event.step if isinstance(event, Progress) else None})
            self._saw(self._busy.after_event(event))
            emit(event)

        return watched

    def wrap_check(self, check: StopCheck) -> StopCheck:
        """`check`, or the watch's stop-and-save once it asked for one."""

        def watched() -> StopRequest | None:
            request = check() or (StopRequest(save=True) if self.reason is not None else None)
            self._saw(self._busy.after_poll(request))
            return request

        return watched

    def start(self) -> SelfWatch:
        threading.Thread(target=self._loop, name="lorastudio-self-watch", daemon=True).start()
        return self

    def close(self) -> None:
        """The run returned: nothing more to watch."""
        self._closed.set()

    def _loop(self) -> None:
        while not self._closed.wait(POLL_S):
            self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        """One look at the run at `now`: ask for the stop when it is hung, end the process when
        it did not answer in time."""
        with self._lock:
            if self.reason is None:
                self.reason = self.watch.overdue(self.run, now)
                if self.reason is None:
                    return
                self._stop_at, self.run.stop_save = now, True
                self._console.print(
                    "the run stopped reporting steps: asking it to stop and save (ended if it does not)",
                    style="yellow",
                    highlight=False,
                )
            deadline = stop_deadline(self._stop_at, self.run.busy, self.run.busy_changed_at, self.timeouts)
        if (
            deadline is not None
            and now >= deadline + self.timeouts.kill_grace_s
            and not self._closed.is_set()
        ):
            self._give_up()

    def _give_up(self) -> None:
        """Record the run failed, remove what a fresh run without a checkpoint wrote, say why
        on one line and end this process (its main thread is hung)."""
        from lorastudio.jobs.killed_notes import record_note
        from lorastudio.jobs.launch_report import record_launch_failure
        from lorastudio.jobs.leftovers import clear_own_run, removal_note
        from lorastudio.settings import get_settings

        note = f"{self.reason}; it did not answer the stop and was terminated; no LoRA was saved"
        self._closed.set()
        if self._run_id is not None:
            record_launch_failure(self._run_id, note)
        if self._run_dir is not None:  # as the service after its worker's kill (jobs/pump.py)
            cleared = clear_own_run(self._run_dir)
            removed = removal_note(self._run_dir, cleared.removed)
            if removed is not None and self._run_id is not None:
                record_note(get_settings(), self._run_dir, self._run_id, removed)
        self._console.print(f"error: {note}", style="red", markup=False, highlight=False, soft_wrap=True)
        self._console.show_cursor(True)  # the progress display hid it; no exit of its own shows it
        sys.stdout.flush()
        sys.stderr.flush()
        self._end(EXIT_HUNG)

    def answered(self) -> str | None:
        """After `train()` returned: the note of a stop it answered (the run saved: recorded
        "stopped" with it and printed as the command's error), or None."""
        from lorastudio.jobs.launch_report import record_launch_failure

        self.close()
        if self.reason is None:
            return None
        if self._run_id is not None:
            record_launch_failure(self._run_id, self.reason, note_stopped=True)
        self._console.print(
            f"error: {self.reason}", style="red", markup=False, highlight=False, soft_wrap=True
        )
        return self.reason


def hang_watch(launched: bool, rank: int, config: Any, run_id: str | None, console: Console) -> Any:
    """The hang watch of this `train` process: a rank of a `--gpus N` launch reports to its
    command's watch (jobs/rank_watch.py; None when it cannot reach it), a one-process run
    watches itself (SelfWatch, started). Either has wrap_emit, wrap_check, answered and close."""
    if launched:
        from lorastudio.jobs.rank_watch import connect_rank_watch

        return connect_rank_watch(rank, config)
    from lorastudio.settings import get_settings

    run_dir = get_settings().outputs_dir / config.output_name if config.output_name else None
    return SelfWatch(config, run_id, run_dir, console).start()
