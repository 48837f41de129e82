"""The memory plan's trials of a run with differential output preservation (training/
preservation.py) run its pass (issue 31 item 5): a DOP step is a plain step plus a no-grad base
forward and a second forward + backward, so a trial without it measured well under half the
step and less memory, and the plan chosen on it came out short. On the tiny FLUX.1 (CPU,
FakeDeviceMeter), the trial of a DOP run takes well over the same run's trial without DOP and
its peak is at least that run's. (A trial's seconds on the CPU include the FakeDeviceMeter's
counting of every op, so they are compared with each other, not with the run's steps.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.training.events import PlanChosen
from lorastudio.training.loop import train
from lorastudio.training.plan_measure import FakeDeviceMeter

KEEP = {"class_word": "shape", "weight": 1.0}
RUN = {"resolution": 64, "batch_size": 4, "steps": 2, "trigger_word": "sks", "memory_budget_gb": 1.0}


def _trial(make_config: Callable[..., TrainConfig], name: str, **over: Any) -> Any:
    """The plain plan's trial of a budgeted run (a large budget: one trial)."""
    events: list[Any] = []
    train(make_config(output_name=name, **RUN, **over), events.append, device="cpu", meter=FakeDeviceMeter())
    (chosen,) = [e for e in events if isinstance(e, PlanChosen)]
    assert chosen.decided_by == "measured" and len(chosen.trials) == 1 and chosen.trials[0].fits
    return chosen.trials[0]


def test_the_trials_of_a_preservation_run_measure_its_pass(make_config: Callable[..., TrainConfig]) -> None:
    pairs = []
    for attempt in range(3):  # a shared host: the seconds of 2 tiny steps vary (the ratio is ~3-4)
        plain = _trial(make_config, f"plain{attempt}")
        dop = _trial(make_config, f"dop{attempt}", preservation=KEEP)
        pairs.append((plain.seconds_per_sample, dop.seconds_per_sample))
        if dop.seconds_per_sample > 1.8 * plain.seconds_per_sample:
            break
    assert pairs[-1][1] > 1.8 * pairs[-1][0], f"(plain trial, DOP trial) s/sample: {pairs}"
    assert dop.peak_memory_gb >= plain.peak_memory_gb  # the base prediction is held beside the pass
