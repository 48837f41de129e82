"""The memory plan's trials of a run with differential output preservation (training/
preservation.py) run its pass (issue 31 item 5): a DOP step is a plain step plus a no-grad base
forward and a second forward + backward, so a trial without it measured well under half the
step and less memory, and the plan chosen on it came out short. On the tiny FLUX.1 (CPU,
FakeDeviceMeter), the trial of a DOP run calls the denoiser three times for each call of the
same run's trial without DOP, and its peak is at least that run's. Counted, not timed: a shared
host's seconds of two tiny steps vary more than the ratio a clock would have to show."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from lorastudio.config import TrainConfig
from lorastudio.training.events import PlanChosen
from lorastudio.training.loop import train
from lorastudio.training.planning.plan_measure import FakeDeviceMeter

KEEP = {"class_word": "shape", "weight": 1.0}
RUN = {"resolution": 64, "batch_size": 4, "steps": 2, "trigger_word": "sks", "memory_budget_gb": 1.0}


def _trial(make_config: Callable[..., TrainConfig], name: str, **over: Any) -> tuple[Any, int]:
    """The plain plan's trial of a budgeted run (a large budget: one trial), and how many times the
    denoiser was called before the plan was chosen (the trial's steps: nothing else calls it then)."""
    events: list[Any] = []
    calls = {"all": 0, "trial": -1}

    def count(module: torch.nn.Module, args: Any) -> None:
        calls["all"] += type(module).__name__ == "FluxTransformer2DModel"

    def on_event(event: Any) -> None:
        if isinstance(event, PlanChosen):
            calls["trial"] = calls["all"]
        events.append(event)

    handle = register_module_forward_pre_hook(count)
    try:
        train(make_config(output_name=name, **RUN, **over), on_event, device="cpu", meter=FakeDeviceMeter())
    finally:
        handle.remove()
    (chosen,) = [e for e in events if isinstance(e, PlanChosen)]
    assert chosen.decided_by == "measured" and len(chosen.trials) == 1 and chosen.trials[0].fits
    return chosen.trials[0], calls["trial"]


def test_the_trials_of_a_preservation_run_measure_its_pass(make_config: Callable[..., TrainConfig]) -> None:
    plain, plain_calls = _trial(make_config, "plain")
    dop, dop_calls = _trial(make_config, "dop", preservation=KEEP)
    assert plain_calls > 0 and dop_calls == 3 * plain_calls  # a base forward and a second pass per step
    assert dop.peak_memory_gb >= plain.peak_memory_gb  # the base prediction is held beside the pass
