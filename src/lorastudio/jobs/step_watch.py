"""The training worker's hang allowance, in its step loop (no torch, no HTTP).

Once a run's step loop runs, the engine reports every optimizer step (`progress`) and announces
the work it does between two steps that may take long (a sample or validation round, a
checkpoint, the final save: jobs/busy.py). Silence then has a bound the run itself measured: no
event for `step_factor` x the slowest step seen so far (the gap between two progress events
with no announced work between them), never less than `min_s`, means the worker is hung (a
driver or collective deadlock, a stalled network file system). The job service then stops it as
a stop-and-save with the stop path's grace (a worker that was only slow saves its LoRA and
ends stopped; one that does not answer is terminated, then killed) and the job says why: for a
multi-GPU job also which rank(s) stopped answering, with their pids, and which still answer
(jobs/rank_silence.py).

Not watched, by decision: the phases before the first step (loading, which may fetch a base
from the hub; the encode caches; the first step, which compiles and runs a memory plan's trials),
announced work (a sample round of a large model may take an hour on a slow card), and a job
already stopping (its own deadlines apply). None of these has a forecast good enough to kill a
run on (the wall-time forecast is a labelled guess on a cold machine), and a user's stop still
ends each of them (stop grace, terminate, kill).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HANG_MIN_S = 1800.0  # the least silence that counts as a hang, whatever the step time
HANG_STEP_FACTOR = 50.0  # silence allowed, in slowest steps


@dataclass
class StepWatch:
    """The silence allowance of one job's step loop. Feed it every event of the job (`saw`);
    `overdue` says when the job is silent past its allowance."""

    min_s: float = HANG_MIN_S
    step_factor: float = HANG_STEP_FACTOR
    last_event_at: float | None = None  # monotonic time of the job's last event in the loop
    last_step_at: float | None = None
    slowest_step_s: float = 0.0
    announced: bool = False  # work was announced since the last step

    def saw(self, data: dict[str, Any], now: float) -> None:
        """Note the job's event `data` (a sanitised engine event or busy message) at `now`."""
        self.last_event_at = now
        kind = data.get("type")
        if kind == "progress":
            if self.last_step_at is not None and not self.announced:
                self.slowest_step_s = max(self.slowest_step_s, now - self.last_step_at)
            self.last_step_at, self.announced = now, False
        elif data.get("work") is not None:  # a busy message: work between two steps
            self.announced = True

    def allowance_s(self) -> float:
        """How long the step loop may stay silent now."""
        return max(self.min_s, self.step_factor * self.slowest_step_s)

    def overdue(self, job: Any, now: float) -> str | None:
        """Why `job` counts as hung at `now` (None: it does not): it is running its step loop
        (a step reported, no work announced, no stop requested) and silent past the allowance."""
        if job.status.value != "running" or job.busy is not None or job.stop_save is not None:
            return None
        if self.last_step_at is None or self.last_event_at is None:
            return None
        silent = now - self.last_event_at
        if silent <= self.allowance_s():
            return None
        return (
            f"the worker sent nothing for {silent:.0f} s after step {job.steps_run} (allowed: "
            f"{self.allowance_s():.0f} s, {self.step_factor:g} x its slowest step of "
            f"{self.slowest_step_s:.1f} s, at least {self.min_s:.0f} s; LORASTUDIO_WORKER_TIMEOUT_SCALE "
            "raises it): it was stopped as hung"
        )
