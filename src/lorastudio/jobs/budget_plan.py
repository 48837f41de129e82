"""The plan a memory budget is forecast to choose, for the preflight's time and host RAM forecasts.

With `memory_budget_gb` (set, or taken from the card's memory: jobs/card_fit.py's "planned") the
settings left at auto are chosen at the start of the run by measuring real steps
(training/planning/plan.PlanSearch): nothing before the run knows the plan. Forecasting its time and host
RAM from the plain default plan (the fastest and lightest on the host: no checkpointing, no block
swap) read a FLUX.1 run planned on a 12 GB card as far faster than its nf4 / checkpointed /
block-swapped steps, and its host RAM without the swapped blocks that wait there.

`budget_plan` walks the engine's own ladders (training/planning/plan.plan_ladders, memory_chain) in the
search's order, precision by precision, each from its fastest chain setting to its lightest, and
takes the first plan whose device forecast (jobs/vram_estimate.py, eager as the trials run, the
conditioning phase as a budgeted run has it) is within the budget; the lightest plan when none
is. Torch-free; the ladders are training/planning/plan.py's, not copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio import families
from lorastudio.config_rules import plan_fields_left_auto
from lorastudio.jobs.vram_estimate import denoiser_param_split, estimate_memory_gb
from lorastudio.training.planning.plan import block_swap_searchable, memory_chain, plan_ladders

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.hardware import HostInfo
    from lorastudio.jobs.preflight import PlanValues


def budget_plan(
    cfg: TrainConfig,
    model_dir: Path | None,
    host: HostInfo,
    budget_gib: float | None,
    controls: float | None = None,
) -> PlanValues | None:
    """The plan the budget `budget_gib` (GiB, as the engine reads memory_budget_gb) is forecast
    to choose for `cfg` on `host` (module docstring). None without a budget, with no plan setting
    left at auto, or without local weights to size (`model_dir` None; jobs/card_fit.sizing_folder
    for a hub id in the hub cache): the caller keeps the default plan's forecast then."""
    from lorastudio.jobs.card_fit import _peak_gib, _per_gpu
    from lorastudio.jobs.preflight import PlanValues, default_plan_values

    if budget_gib is None or model_dir is None or not plan_fields_left_auto(cfg):
        return None
    denoiser = model_dir / families.get(cfg.family).spec.denoiser
    if not denoiser.is_dir():
        return None
    plain = str(default_plan_values(cfg, host)["base_precision"])
    ladders = plan_ladders(
        cfg,
        plain,
        runnable=lambda precision: precision in host.precisions,
        block_count=len(denoiser_param_split(denoiser)[1]),
        swap_possible=block_swap_searchable(cfg, host.device),
        world_size=max(cfg.num_gpus, 1),
    )
    chain = memory_chain(ladders)
    plans = [
        PlanValues(precision, checkpointing, offload, micro)
        for precision in ladders.precisions
        for offload, checkpointing, micro in chain
    ]
    for plan in plans:  # the search's order: fastest first within a precision, then the next one
        phases = estimate_memory_gb(cfg, model_dir, _per_gpu(plan, cfg.num_gpus), controls)["phases"]
        if phases is None:
            return None
        if _peak_gib(phases, budget_gib) <= budget_gib:
            return plan
    return plans[-1]


def plan_words(plan: PlanValues) -> str:
    """`plan` in a line: 'nf4, full checkpointing, 19 blocks swapped, micro-batch 1'."""
    checkpointing = (
        "no checkpointing" if plan.gradient_checkpointing == "off" else plan.gradient_checkpointing
    )
    if plan.gradient_checkpointing != "off":
        checkpointing += " checkpointing"
    swap = f"{plan.offload_blocks} blocks swapped" if plan.offload_blocks else "no block swap"
    return f"{plan.base_precision}, {checkpointing}, {swap}, micro-batch {plan.micro_batch_size}"
