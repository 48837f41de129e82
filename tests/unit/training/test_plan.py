"""The memory plan: fixed plans, the budget chooser (its search on exact tables, and the real
train() on tiny models measured by a FakeDeviceMeter), resume reusing the plan, micro-batches
with the maths of the unsplit batch, and the host checks."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest
import torch

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import PlanChosen, PlanTrial
from lorastudio.training.loop import TrainResult, train
from lorastudio.training.planning.plan import (
    GIB,
    Ladders,
    Plan,
    PlanSearch,
    memory_chain,
    micro_batch_ladder,
    plan_host_problems,
    plan_ladders,
    resolve_fixed_plan,
    swap_ladder,
)
from lorastudio.training.planning.plan_measure import FakeDeviceMeter
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings

CPU = torch.device("cpu")
# a run whose activations dominate the tiny model's weights: 64 px, 4 samples per batch
BUDGETED = {"resolution": 64, "batch_size": 4}
PLAIN = Plan("fp32", "off", 0, 4)  # what auto means on the CPU without a budget

# -- the search, on exact tables ----------------------------------------------------------------

LADDERS = Ladders(("bf16", "int8", "nf4"), ("off", "selective", "full"), (0, 5, 10, 15, 19), (4, 2, 1))


def _table(search: PlanSearch, seed: int) -> dict[Plan, tuple[float, float]]:
    """plan -> (seconds per sample, peak GiB): random, but monotone as the search assumes (down
    the memory chain and down the precisions, memory falls and time rises)."""
    rnd = random.Random(seed)
    precisions, length = len(search.ladders.precisions), len(search.chain)
    p_time = [0.0] + [rnd.uniform(0.1, 1.0) for _ in range(precisions - 1)]
    p_mem = [0.0] + [rnd.uniform(1.0, 4.0) for _ in range(precisions - 1)]
    c_time = [0.0] + [rnd.uniform(0.02, 0.5) for _ in range(length - 1)]
    c_mem = [0.0] + [rnd.uniform(0.2, 2.0) for _ in range(length - 1)]
    return {
        search.plan((p, i)): (
            1 + sum(p_time[: p + 1]) + sum(c_time[: i + 1]),
            30 - sum(p_mem[: p + 1]) - sum(c_mem[: i + 1]),
        )
        for p, i in itertools.product(range(precisions), range(length))
    }


def _measurer(table: dict[Plan, tuple[float, float]], budget_gb: float, log: list[Plan]):
    def measure(plan: Plan) -> PlanTrial:
        log.append(plan)
        seconds, peak = table[plan]
        return plan.trial(seconds, int(peak * GIB), int(peak * GIB) <= int(budget_gb * GIB))

    return measure


def test_the_memory_chain_steps_one_setting_at_a_time():
    chain = memory_chain(LADDERS)
    assert chain[:5] == [(0, "off", 4), (0, "off", 2), (0, "off", 1), (0, "selective", 1), (0, "full", 1)]
    assert chain[5:] == [(5, "full", 1), (10, "full", 1), (15, "full", 1), (19, "full", 1)]


def test_the_plain_plan_alone_is_measured_when_it_fits():
    search = PlanSearch(LADDERS, int(40 * GIB))
    log: list[Plan] = []
    plan, trials = search.run(_measurer(_table(search, 0), 40, log))
    assert plan == Plan("bf16", "off", 0, 4) and log == [plan] and trials[0].fits


@pytest.mark.parametrize("seed", range(20))
def test_the_search_finds_the_fastest_plan_that_fits_in_a_few_trials(seed):
    search = PlanSearch(LADDERS, 0, max_trials=100)
    table = _table(search, seed)
    peaks = sorted(p for _, p in table.values())
    budget = peaks[seed % len(peaks)] + 1e-6  # from "only the lightest fits" to "most fit"
    search.budget_bytes = int(budget * GIB)
    log: list[Plan] = []
    plan, trials = search.run(_measurer(table, budget, log))
    fitting = {pl: s for pl, (s, p) in table.items() if int(p * GIB) <= int(budget * GIB)}
    assert plan == min(fitting, key=fitting.get)
    assert len(log) == len(set(log)) == len(trials) <= 2 + 3 * math.ceil(math.log2(len(search.chain) + 1))
    assert log[0] == Plan("bf16", "off", 0, 4) and log[1] == Plan("nf4", "full", 19, 1)


def test_the_trials_are_capped():
    search = PlanSearch(LADDERS, 0, max_trials=4)
    table = _table(search, 7)
    budget = sorted(p for _, p in table.values())[3] + 1e-6
    search.budget_bytes = int(budget * GIB)
    log: list[Plan] = []
    plan, _ = search.run(_measurer(table, budget, log))
    assert len(log) == 4 and plan in log and table[plan][1] <= budget


def test_when_nothing_fits_the_lightest_plan_ends_the_search_naming_its_peak():
    search = PlanSearch(LADDERS, 0)
    table = _table(search, 3)
    lightest_peak = min(p for _, p in table.values())
    search.budget_bytes = int(0.5 * lightest_peak * GIB)
    log: list[Plan] = []
    with pytest.raises(ConfigError) as err:
        search.run(_measurer(table, 0.5 * lightest_peak, log))
    assert log == [Plan("bf16", "off", 0, 4), Plan("nf4", "full", 19, 1)]
    (problem,) = err.value.problems
    assert problem.field == "memory_budget_gb" and f"{lightest_peak:.3g} GB" in problem.message


def test_ladders_vary_only_the_settings_left_at_auto_and_never_offer_fp8():
    cfg = TrainConfig(family="flux", base_model="x/y", data_dir="d", batch_size=8, memory_budget_gb=10)
    everything = plan_ladders(cfg, "bf16", runnable=lambda p: True, block_count=19, swap_possible=True)
    assert everything == Ladders(
        ("bf16", "int8", "nf4"), ("off", "selective", "full"), (0, 5, 10, 14, 19), (8, 4, 2, 1)
    )
    no_nf4 = plan_ladders(cfg, "bf16", runnable=lambda p: p != "nf4", block_count=19, swap_possible=False)
    assert no_nf4.precisions == ("bf16", "int8") and no_nf4.offload == (0,)
    fixed = cfg.model_copy(
        update={"base_precision": "fp8", "gradient_checkpointing": "full", "micro_batch_size": 2}
    )
    kept = plan_ladders(fixed, "bf16", runnable=lambda p: True, block_count=19, swap_possible=True)
    assert kept.precisions == ("fp8",) and kept.checkpointing == ("full",) and kept.micro_batches == (2,)
    assert memory_chain(kept) == [
        (0, "full", 2),
        (5, "full", 2),
        (10, "full", 2),
        (14, "full", 2),
        (19, "full", 2),
    ]
    for ladders in (everything, no_nf4):
        search = PlanSearch(ladders, 0)
        points = itertools.product(range(len(ladders.precisions)), range(len(search.chain)))
        assert all(search.plan(pt).base_precision != "fp8" for pt in points)


def test_ladder_values():
    assert micro_batch_ladder(8) == [8, 4, 2, 1] and micro_batch_ladder(6) == [6, 3, 1]
    assert micro_batch_ladder(1) == [1] and micro_batch_ladder(8, world_size=2) == [8, 4, 2]
    assert swap_ladder(57) == [0, 14, 28, 43, 57] and swap_ladder(2) == [0, 1, 2] and swap_ladder(0) == [0]


def test_the_fixed_plan_fills_auto_with_the_plain_defaults(make_config):
    cfg = make_config(batch_size=4)
    assert resolve_fixed_plan(cfg, CPU) == PLAIN
    explicit = make_config(
        batch_size=4, base_precision="int8", gradient_checkpointing="selective", micro_batch_size=2
    )
    assert resolve_fixed_plan(explicit, CPU) == Plan("int8", "selective", 0, 2)


# -- the fake device ------------------------------------------------------------------------------


def test_the_fake_device_counts_live_tensors_and_runs_out_of_memory():
    meter = FakeDeviceMeter(capacity_bytes=10_000)
    x = torch.ones(100)  # made before tracking: counted at its first use
    with meter.tracking():
        y = x * 2  # [100] fp32: 400 bytes, and x's 400
        assert meter.live == 800
        z = torch.zeros(1000, dtype=torch.float64)  # 8000 bytes
        assert meter.peak_bytes() == 8800
        del z
        assert meter.live == 800
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(3000)  # 12000 bytes > capacity
    meter.reset_peak()
    assert meter.peak_bytes() == meter.live == 800
    del y


# -- the chooser in real runs (tiny FLUX.1, fake device) --------------------------------------------

_runs: dict[str, tuple[TrainResult, list[Any]]] = {}


def _run(make_config, key: str, meter: FakeDeviceMeter | None = None, **overrides: Any):
    """A 2-step run (cached per key); returns (result, events)."""
    if key not in _runs:
        events: list[Any] = []
        cfg = make_config(output_name=key, **{**BUDGETED, **overrides})
        result = train(cfg, events.append, device="cpu", meter=meter)
        _runs[key] = (result, events)
    return _runs[key]


def _plan_event(events: list[Any]) -> PlanChosen:
    plans = [e for e in events if e.type == "plan_chosen"]
    assert len(plans) == 1
    types = [e.type for e in events]
    assert types.index("plan_chosen") < types.index("progress")
    return plans[0]


def _plain_peak_gb(make_config) -> float:
    _, events = _run(make_config, "large", FakeDeviceMeter(), memory_budget_gb=1.0)
    return _plan_event(events).trials[0].peak_memory_gb


def test_without_a_budget_the_settings_decide(make_config):
    _, events = _run(make_config, "fixed")
    chosen = _plan_event(events)
    assert chosen.decided_by == "settings" and not chosen.trials and chosen.memory_budget_gb is None
    assert Plan(chosen.base_precision, chosen.gradient_checkpointing, 0, chosen.micro_batch_size) == PLAIN
    assert not chosen.compile  # compile auto is off on the CPU


def test_a_large_budget_keeps_the_fast_plain_plan_after_one_trial(make_config):
    result, events = _run(make_config, "large", FakeDeviceMeter(), memory_budget_gb=1.0)
    chosen = _plan_event(events)
    assert chosen.decided_by == "measured" and chosen.memory_budget_gb == 1.0
    (trial,) = chosen.trials
    assert trial.fits and 0 < trial.peak_memory_gb < 1.0 and trial.seconds_per_sample > 0
    assert (trial.base_precision, trial.gradient_checkpointing, trial.micro_batch_size) == ("fp32", "off", 4)
    # the trials draw from their own streams: the run is the one without a budget
    fixed, _ = _run(make_config, "fixed")
    assert result.losses == fixed.losses


def test_a_small_budget_picks_the_fastest_lighter_plan_that_fits(make_config):
    budget = 0.75 * _plain_peak_gb(make_config)
    _, events = _run(make_config, "small", FakeDeviceMeter(), memory_budget_gb=budget)
    chosen = _plan_event(events)
    first = chosen.trials[0]
    assert first.micro_batch_size == 4 and first.gradient_checkpointing == "off" and not first.fits
    fitting = [t for t in chosen.trials if t.fits]
    assert fitting and all(t.peak_memory_gb <= budget for t in fitting)
    fastest = min(fitting, key=lambda t: t.seconds_per_sample)
    picked = (chosen.base_precision, chosen.gradient_checkpointing, chosen.micro_batch_size)
    assert picked == (fastest.base_precision, fastest.gradient_checkpointing, fastest.micro_batch_size)
    assert picked != ("fp32", "off", 4) and chosen.base_precision != "fp8"
    assert len(chosen.trials) <= 8  # not every candidate (27)


LIGHT = {
    "gradient_checkpointing": "full",
    "micro_batch_size": 1,
    "batch_size": 2,
}  # only the precision is left


def _quantised_run(make_config) -> tuple[TrainResult, list[Any]]:
    """A 3-step run (checkpoint every step) whose budget is below the lightest fp32 plan."""
    _, events = _run(
        make_config, "fp32-floor", FakeDeviceMeter(), memory_budget_gb=1.0, base_precision="fp32", **LIGHT
    )
    floor = _plan_event(events).trials[0].peak_memory_gb  # the lightest fp32 plan
    return _run(
        make_config,
        "quantised",
        FakeDeviceMeter(),
        memory_budget_gb=0.9 * floor,
        steps=3,
        save_every=1,
        **LIGHT,
    )


def test_a_budget_below_the_fp32_base_quantises_it_and_keeps_the_explicit_settings(make_config):
    _, events = _quantised_run(make_config)
    chosen = _plan_event(events)
    assert chosen.base_precision in ("int8", "nf4")
    assert all((t.gradient_checkpointing, t.micro_batch_size) == ("full", 1) for t in chosen.trials)
    assert [t.base_precision for t in chosen.trials if not t.fits] == ["fp32"]


def test_an_impossible_budget_is_refused_naming_the_smallest_peak(make_config):
    events: list[Any] = []
    cfg = make_config(output_name="impossible", memory_budget_gb=1e-6, **BUDGETED)
    with pytest.raises(ConfigError) as err:
        train(cfg, events.append, device="cpu", meter=FakeDeviceMeter())
    (problem,) = err.value.problems
    assert problem.field == "memory_budget_gb" and "smallest measured peak was" in problem.message
    assert events[-1].type == "error" and not [e for e in events if e.type == "plan_chosen"]
    assert not (get_settings().outputs_dir / "impossible").exists()


def test_out_of_memory_means_does_not_fit_and_the_search_goes_on(make_config):
    capacity = int(0.8 * _plain_peak_gb(make_config) * GIB)  # the plain plan runs out of device memory
    meter = FakeDeviceMeter(capacity_bytes=capacity)
    _, events = _run(
        make_config, "oom", meter, memory_budget_gb=1.0, base_precision="fp32", gradient_checkpointing="off"
    )
    chosen = _plan_event(events)
    first = chosen.trials[0]
    assert not first.fits and first.peak_memory_gb is None and first.note.startswith("out of memory")
    assert chosen.micro_batch_size < 4 and chosen.decided_by == "measured"
    assert all(t.fits for t in chosen.trials[1:])


def test_a_resume_reuses_the_measured_plan(make_config):
    full, events = _quantised_run(make_config)
    chosen = _plan_event(events)
    # the run as a kill right after its first checkpoint leaves it (a finished run, with its final
    # LoRA and sidecar, is only resumed to train longer)
    full.lora_path.unlink()
    full.lora_path.with_suffix(".json").unlink()
    checkpoint = find_checkpoint(full.lora_path.parent / "checkpoints" / "step-000001")
    info = read_checkpoint_info(checkpoint)
    assert info["plan"] == chosen.model_dump(include=set(Plan.__dataclass_fields__))

    resumed_events: list[Any] = []
    again = TrainConfig.model_validate(resume_settings(info, {}))
    resumed = train(again, resumed_events.append, device="cpu", resume=checkpoint, meter=FakeDeviceMeter())
    plan = _plan_event(resumed_events)
    assert plan.decided_by == "checkpoint" and not plan.trials and plan.base_precision in ("int8", "nf4")
    fields = set(Plan.__dataclass_fields__)
    assert plan.model_dump(include=fields) == chosen.model_dump(include=fields)
    assert resumed.losses == full.losses  # the maths of the uninterrupted run


# -- micro-batches ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["flux", "sdxl", "qwen-image", "z-image"])
def test_micro_batches_give_the_losses_of_the_unsplit_batch(family, make_config):
    whole_events: list[Any] = []
    whole = train(make_config(family, output_name="whole", batch_size=4), whole_events.append, device="cpu")
    split_events: list[Any] = []
    cfg = make_config(family, output_name="split", batch_size=4, micro_batch_size=1)
    split = train(cfg, split_events.append, device="cpu")
    assert _plan_event(split_events).micro_batch_size == 1 and _plan_event(whole_events).micro_batch_size == 4
    assert split.losses == pytest.approx(whole.losses, rel=1e-5, abs=1e-6)


# -- host checks ------------------------------------------------------------------------------------


def test_plan_host_problems():
    cfg = TrainConfig(family="flux", base_model="x/y", data_dir="d", memory_budget_gb=8, offload_blocks=4)
    assert plan_host_problems(cfg, "cuda") == []
    fields = {p.field: p.message for p in plan_host_problems(cfg, "cpu")}
    assert set(fields) == {"memory_budget_gb", "offload_blocks"}
    assert "CUDA" in fields["memory_budget_gb"] and "cpu" in fields["memory_budget_gb"]


def test_a_budget_without_cuda_is_refused_before_anything_loads(make_config):
    events: list[Any] = []
    with pytest.raises(ConfigError) as err:
        train(make_config(output_name="nobudget", memory_budget_gb=4.0), events.append, device="cpu")
    assert [p.field for p in err.value.problems] == ["memory_budget_gb"]
    assert [e.type for e in events] == ["error"]
