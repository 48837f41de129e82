"""Step bookkeeping: steady-state throughput, running loss, divergence guard."""

from __future__ import annotations

import math

import pytest

from lorastudio.errors import TrainingDiverged
from lorastudio.training.meter import AVG_WINDOW, DivergenceGuard, StepMeter


def test_samples_per_second_excludes_the_first_step():
    times = iter([10.0, 11.0, 11.5, 12.0])  # the first step ends at 10 s (slow warm-up)
    meter = StepMeter(clock=lambda: next(times))
    meter.step_done(1.0, 4)
    assert meter.samples_per_second is None
    for _ in range(3):
        meter.step_done(1.0, 4)
    assert meter.samples_per_second == pytest.approx(12 / 2.0)  # 3 steps x 4 samples in 2 s


def test_avg_loss_is_a_window_of_finite_losses():
    meter = StepMeter(clock=lambda: 0.0)
    losses = [float(i) for i in range(AVG_WINDOW + 10)]
    for loss in losses:
        meter.step_done(loss, 1)
    meter.step_done(math.nan, 1)
    assert meter.avg_loss == pytest.approx(sum(losses[-AVG_WINDOW:]) / AVG_WINDOW)


def test_divergence_guard_skips_bad_steps_and_gives_up_after_patience():
    guard = DivergenceGuard(patience=3)
    assert guard.check(1, 0.5, 1.0)
    assert not guard.check(2, math.nan, 1.0)
    assert not guard.check(3, 0.5, math.inf)
    assert guard.check(4, 0.5, None)  # a good step resets the count
    assert not guard.check(5, math.inf, None)
    assert not guard.check(6, math.nan, None)
    with pytest.raises(TrainingDiverged, match="3 steps in a row"):
        guard.check(7, math.nan, None)


def test_skipped_steps_are_told_at_the_first_and_at_each_power_of_ten():
    """RELIABILITY 1904: a few warnings however many steps are skipped, each with the count."""
    guard = DivergenceGuard(patience=2)
    told = {}
    for step in range(1, 2001):
        guard.check(step, float("nan"), None)  # a bad step, then a good one: never two in a row
        if (note := guard.skip_note(step, float("nan"), None)) is not None:
            told[guard.skipped] = note
        guard.check(step, 1.0, 1.0)
    assert sorted(told) == [1, 10, 100, 1000]
    assert told[1].startswith("1 step was skipped so far") and told[10].startswith("10 steps were skipped")
    assert "stops after 2 in a row" in told[1000]


def test_samples_per_second_leaves_the_rounds_between_steps_out():
    """RELIABILITY 1908: a sample or validation round, a checkpoint between two steps counted as
    step time (1.46 samples/s at step 2, 0.32 at step 3 after a 4 s validation round)."""
    now = [0.0]
    meter = StepMeter(clock=lambda: now[-1])
    with meter.rounds():  # before the first step is done (the start): not the steps' either
        now.append(5.0)
    now.append(10.0)
    meter.step_done(1.0, 4)  # step 1 ends at 10 s
    now.append(11.0)
    meter.step_done(1.0, 4)  # step 2: 1 s
    with meter.rounds():  # a 40 s round
        now.append(51.0)
    now.append(52.0)
    meter.step_done(1.0, 4)  # step 3: 1 s
    assert meter.samples_per_second == pytest.approx(8 / 2.0)  # before: 8 / 42 s
    meter.load_state_dict(meter.state_dict())  # a resume: the pace starts again
    now.append(60.0)
    meter.step_done(1.0, 4)
    with meter.rounds():
        now.append(70.0)
    now.append(72.0)
    meter.step_done(1.0, 4)
    assert meter.samples_per_second == pytest.approx(4 / 2.0)
