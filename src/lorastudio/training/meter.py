"""Per-step bookkeeping of the loop: running loss average, steady-state throughput, and the
divergence guard (non-finite loss or gradients several steps in a row stop the run)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lorastudio.errors import TrainingDiverged

AVG_WINDOW = 50  # steps in the running loss average


class StepMeter:
    """Call `step_done(loss, samples)` after each optimizer step.

    avg_loss: mean of the last AVG_WINDOW finite losses. samples_per_second: samples of steps
    2..n over the time since step 1 ended (steady state: the first step, with its warm-up and
    lazy initialisation, is excluded), less the time of the rounds between steps (`rounds()`:
    previews, validation, checkpoints and snapshots; they counted, and the figure fell after each:
    1.46 at step 2, 0.32 at step 3 after a 4 s validation round, RELIABILITY 1908); None until a
    second step is done.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.perf_counter
        self._recent: deque[float] = deque(maxlen=AVG_WINDOW)
        self._first_done_at: float | None = None
        self._samples_after_first = 0
        self._last_at = 0.0
        self._between = 0.0  # seconds of rounds between steps since step 1 ended (`rounds`)
        self._created_wall = time.perf_counter()  # the log's first-step seconds (not `clock`)
        self._first_wall: float | None = None
        self.steps = 0
        self.session_steps = 0  # steps done by this meter (`steps` continues a checkpoint's count)

    def step_done(self, loss: float, samples: int) -> None:
        now = self._clock()
        self.steps += 1
        self.session_steps += 1
        if self.session_steps == 1:
            self._first_wall = time.perf_counter()
        if math.isfinite(loss):
            self._recent.append(loss)
        if self._first_done_at is None:
            self._first_done_at = now
        else:
            self._samples_after_first += samples
        self._last_at = now

    @contextmanager
    def rounds(self) -> Iterator[None]:
        """The work between two steps done in the block (a sample or validation round, a
        checkpoint, a snapshot): its time is left out of samples_per_second once a step is done."""
        started = self._clock()
        try:
            yield
        finally:
            if self._first_done_at is not None:
                self._between += self._clock() - started

    @property
    def first_step_seconds(self) -> float | None:
        """Seconds from this meter's creation (just before the loop) to its first step's end."""
        return None if self._first_wall is None else self._first_wall - self._created_wall

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the steps and the losses of the running average. Throughput
        is wall-clock and is not carried over (it restarts after a resume)."""
        return {"steps": self.steps, "recent": list(self._recent)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; the throughput restarts (the next step counts as the first)."""
        self.steps = int(state["steps"])
        self._recent = deque((float(x) for x in state["recent"]), maxlen=AVG_WINDOW)
        self._first_done_at = None
        self._samples_after_first = 0
        self._between = 0.0

    @property
    def avg_loss(self) -> float:
        return sum(self._recent) / len(self._recent) if self._recent else float("nan")

    @property
    def samples_per_second(self) -> float | None:
        if self.steps < 2 or self._first_done_at is None:
            return None
        elapsed = self._last_at - self._first_done_at - self._between
        return self._samples_after_first / elapsed if elapsed > 0 else None


class DivergenceGuard:
    """Counts steps whose loss or gradient norm is not finite (such a step is skipped by the loop:
    no optimizer update). `check` returns True when the step may be applied, and raises
    TrainingDiverged ("training diverged at step N ...") once `patience` bad steps come in a row.
    `skipped` counts every skipped step of the run."""

    def __init__(self, patience: int = 3) -> None:
        self.patience = patience
        self.bad_in_a_row = 0
        self.skipped = 0

    def check(self, step: int, loss: float, grad_norm: float | None) -> bool:
        finite = math.isfinite(loss) and (grad_norm is None or math.isfinite(grad_norm))
        if finite:
            self.bad_in_a_row = 0
            return True
        self.bad_in_a_row += 1
        self.skipped += 1
        if self.bad_in_a_row >= self.patience:
            raise TrainingDiverged(
                f"training diverged at step {step}: the loss or gradients were not finite for "
                f"{self.bad_in_a_row} steps in a row (loss {loss}, grad norm {grad_norm}); lower the "
                "learning rate, turn gradient clipping on (max_grad_norm) or use fp32/bf16; no LoRA "
                "was written from the diverged weights"
            )
        return False

    def skip_note(self, step: int, loss: float, grad_norm: float | None) -> str | None:
        """What the run's record says of the step `check` just skipped (a RunWarning's text), at
        the run's first skipped step and its 10th, 100th, ...: a few lines however many, each with
        the count; None otherwise. Before, a server run's skipped steps were said nowhere: its log
        has no step lines, its record and the web UI no skipped count (RELIABILITY 1904)."""
        count = self.skipped
        if count < 1 or 10 ** round(math.log10(count)) != count:
            return None
        what = "step was" if count == 1 else "steps were"
        return (
            f"{count} {what} skipped so far (no update): the loss or gradients were not finite, the newest at "
            f"step {step} (loss {loss}, grad norm {grad_norm}); the run stops after {self.patience} in a row (max_bad_steps); "
            "if it goes on, lower the learning rate or turn gradient clipping on (max_grad_norm)"
        )

    def state_dict(self) -> dict[str, int]:
        return {"bad_in_a_row": self.bad_in_a_row, "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bad_in_a_row = int(state["bad_in_a_row"])
        self.skipped = int(state["skipped"])
