"""Whether a run's memory plan fits the GPU it trains on, judged before any model loads.

Without `memory_budget_gb` the settings left at auto take their plain defaults (training/planning/plan.py:
bf16, or fp32 on a GPU without bf16; no checkpointing, no block swap, the whole batch per pass):
FLUX.1's forecast is ~51 GB, Qwen-Image's ~68, Z-Image's ~33, SDXL's ~13 at 1024 px. On a 12-24 GB
card such a run loaded its text encoders, cached its latents and ran out of memory loading the
denoiser (or, Qwen-Image on 16 GB, the text encoder), minutes in, though a low-memory plan fits
those cards (bench/RESULTS.md note 10: FLUX.1 9.0, Qwen-Image 13.2, Z-Image 5.9, SDXL 3.7 GiB).

`card_fit` compares the forecasts (jobs/vram_estimate.py, in GB) with the card's memory (GiB,
less CARD_RESERVE_GIB for the CUDA context and the allocator's slack) and answers one of:

- "fits": the plan the run would use is forecast within the card;
- "planned": no memory budget, a plan setting left at auto, the default plan is forecast over the
  card and the lightest plan the settings allow within it (or its error): the run takes the card's usable memory
  as its memory budget (`budget_gib`), so the settings left at auto are chosen by measuring a few
  real steps (training/planning/plan.py), and text encoders whose weights exceed ENCODER_BUDGET_SHARE of it
  encode on the CPU (training/inputs/conditioning.py). The engine applies it (training/preflight.py);
  the preflight report shows it;
- "tight": every plan setting fixed, or a budget set, and forecast over the usable memory but within
  the forecast's own error (FIT_TOLERANCE) of the whole card: a warning;
- "refused": even the lightest plan the settings allow is forecast over the card by more than
  FIT_TOLERANCE: `problem` names the card, the forecast and what would fit; or a `memory_budget_gb`
  below the lightest plan's denoiser phase (what the engine's search measures against the budget:
  a trial's peak reserved memory, training/planning/plan_measure.py) by more than BUDGET_TOLERANCE: the
  search would refuse it only after the models loaded and its trials ran (RELIABILITY 1180).

No verdict (None) off CUDA, with the GPU's memory unknown, or without local weights to size (a
single file; a hub id whose denoiser is not in the hub cache: `sizing_folder`). No torch: the
engine passes its own device's facts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from lorastudio.config_rules import plan_fields_left_auto
from lorastudio.errors import FieldProblem
from lorastudio.jobs.vram_estimate import estimate_memory_gb

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.jobs.hardware import HostInfo
    from lorastudio.jobs.preflight import PlanValues

GIB = 1024**3
# Kept off the plan on every card: the CUDA context (~0.3-0.5 GiB outside torch's allocator) and the
# caching allocator's slack (reserved over allocated: 0.3-1.2 GiB in RESULTS note 10).
CARD_RESERVE_GIB = 1.0
# The forecast's stated error (jobs/vram_estimate.py: within 15 % of the measured peaks): a plan is
# refused only when its forecast exceeds the whole card by more than this.
FIT_TOLERANCE = 0.15
# As training/inputs/conditioning.ENCODER_BUDGET_SHARE (torch-free here): a budgeted run's text encoders
# stay on the device when their weights fit this share of the budget, else they encode on the CPU.
ENCODER_BUDGET_SHARE = 0.85
# A set budget is refused before the run only when the lightest plan's denoiser phase is forecast
# over it by more than this: the low-memory plans' forecasts ran 1-19 % over their measured peaks
# (jobs/vram_estimate.DEVICE_ACTIVATION_FACTOR), so a budget the search could still meet is left to it.
BUDGET_TOLERANCE = 0.25
_OVERHEAD_GB = 1.0  # vram_estimate's, in each phase

Verdict = Literal["fits", "planned", "tight", "refused"]


@dataclass(frozen=True)
class CardFit:
    """card_fit's answer: `verdict`; `card_gib` the card's memory; `default_gib` / `lightest_gib`
    the forecasts (GiB) of the run's plan and of the lightest one its settings allow;
    `budget_gib` the memory budget the run takes ("planned"; else None); `note` one sentence for
    the preflight, the CLI and the run's log; `problem` the refusal ("refused"; else None)."""

    verdict: Verdict
    card_gib: float
    default_gib: float
    lightest_gib: float
    budget_gib: float | None
    note: str
    problem: FieldProblem | None = None


def card_memory_gib(host: HostInfo, num_gpus: int = 1) -> float | None:
    """The memory (GiB) a run has on each of its GPUs: GPU 0's (in CUDA_VISIBLE_DEVICES order, the
    run's `cuda`), or the smallest of the first `num_gpus` (a data-parallel rank per GPU). None off
    CUDA or when unknown, and when a size is not a finite number of at least 0 (RELIABILITY 1161: a NaN
    or infinite size raised ValueError / OverflowError in the budget's rounding, a 500 for the run's
    check; no verdict is told for a card whose size is not known)."""
    if host.device != "cuda" or host.memory_gb is None:
        return None
    sizes = (host.gpu_memory_gb or (host.memory_gb,))[: max(num_gpus, 1)]
    if not all(isinstance(gib, int | float) and math.isfinite(gib) and gib >= 0 for gib in sizes):
        return None
    return min(sizes)


def card_fit(
    cfg: TrainConfig,
    model_dir: Path | None,
    host: HostInfo,
    controls: float | None = None,
    *,
    compiled: bool = False,
) -> CardFit | None:
    """The run's plan against its GPU (module docstring). `host` gives the plan's defaults
    (bf16 or fp32, the quantised precisions it runs) and the card's memory
    (card_memory_gib(host, cfg.num_gpus)); `controls` as estimate_memory_gb's; `compiled`:
    regional compile will be on. None when there is nothing to judge."""
    from lorastudio.jobs.preflight import plan_for_estimate

    card = card_memory_gib(host, cfg.num_gpus)
    if card is None or host.device != "cuda":
        return None
    model_dir = sizing_folder(cfg, model_dir)
    per_gpu = _per_gpu(plan_for_estimate(cfg, host), cfg.num_gpus)
    plain = estimate_memory_gb(cfg, model_dir, per_gpu, controls, compiled=compiled)
    if plain["phases"] is None:
        return None
    lightest_plan = _per_gpu(plan_for_estimate(cfg, host, lightest=True), cfg.num_gpus)
    # a budget's trials measure eagerly (training/planning/plan.py): so is the lightest plan's forecast
    lightest = estimate_memory_gb(cfg, model_dir, lightest_plan, controls, compiled=False)["phases"]
    usable = max(card - CARD_RESERVE_GIB, 0.0)
    implied = math.floor(usable * 10) / 10
    budget = cfg.memory_budget_gb
    left = bool(plan_fields_left_auto(cfg))
    default_gib = _peak_gib(plain["phases"], budget)
    lightest_gib = _peak_gib(lightest, budget if budget is not None else implied) if left else default_gib
    judged = lightest_gib if left else default_gib  # what the settings can come down to
    fits = f"forecast at ~{default_gib:.1f} GiB: fits the {card:g} GiB of {host.name}"
    if budget is None and default_gib <= usable:
        return CardFit("fits", card, default_gib, lightest_gib, None, fits)
    if judged > card * (1 + FIT_TOLERANCE) or (budget is None and left and implied <= 0):
        problem = FieldProblem(
            "memory_budget_gb" if budget is not None else "base_precision",
            f"the run is forecast at ~{judged:.1f} GiB of GPU memory even at the lightest plan its settings"
            f" allow, over the {card:g} GiB of {host.name}: {_what_fits(cfg, host)}",
        )
        return CardFit("refused", card, default_gib, lightest_gib, None, problem.message, problem)
    trial_gib = (lightest if left else plain["phases"])["denoiser"] * 1e9 / GIB  # what a trial measures
    if budget is not None and trial_gib > budget * (1 + BUDGET_TOLERANCE):
        problem = FieldProblem(
            "memory_budget_gb",
            f"memory_budget_gb {budget:g} is below the lightest plan's forecast: its denoiser is forecast at"
            f" ~{trial_gib:.1f} GiB of GPU memory even at the lightest plan the settings allow, so no plan"
            f" can be measured within the budget; raise it to ~{trial_gib:.1f} or more, or {_what_fits(cfg, host)}",
        )
        return CardFit("refused", card, default_gib, lightest_gib, None, problem.message, problem)
    rough = f" (the forecast is rough, within {FIT_TOLERANCE:.0%}: it may run out of memory)"
    if budget is None and left:
        note = (
            f"the default plan is forecast at ~{default_gib:.1f} GiB, over the {card:g} GiB of {host.name}:"
            f" the run takes memory_budget_gb {implied:g} (the card less {CARD_RESERVE_GIB:g} GiB) and"
            f" measures the settings left at auto (the lightest forecast at ~{lightest_gib:.1f} GiB)"
        )
        return CardFit(
            "planned", card, default_gib, lightest_gib, implied, note + (rough if judged > usable else "")
        )
    if judged <= usable:  # the lightest plan the budget may choose fits
        lightest_fits = (
            f"the lightest plan is forecast at ~{lightest_gib:.1f} GiB: fits the {card:g} GiB of {host.name}"
        )
        return CardFit("fits", card, default_gib, lightest_gib, None, lightest_fits)
    note = f"the plan is forecast at ~{judged:.1f} GiB against the {card:g} GiB of {host.name}{rough}"
    return CardFit("tight", card, default_gib, lightest_gib, None, note)


def sizing_folder(cfg: TrainConfig, model_dir: Path | None) -> Path | None:
    """The folder whose safetensors headers size the run: `model_dir` (a local pipeline folder),
    else for a hub id (no single file) its snapshot in the hub cache when the denoiser's weights
    are there (what the loaders read; a snapshot missing them is left to the loader: None)."""
    if model_dir is not None:
        return model_dir
    from lorastudio import families
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id

    if cfg.base_config is not None or not is_hub_id(cfg.base_model):
        return None
    snapshot = cached_snapshot(cfg.base_model, cfg.revision)
    denoiser = snapshot / families.get(cfg.family).spec.denoiser if snapshot is not None else None
    if denoiser is None or not any(denoiser.glob("*.safetensors")):
        return None
    return snapshot


def _per_gpu(plan: PlanValues, num_gpus: int) -> PlanValues:
    """`plan` as one GPU of a data-parallel run holds it: micro_batch_size is the samples of a
    pass over all the ranks (training/planning/micro_batches.py gives each rank its slice), so one GPU
    holds ceil(micro / num_gpus) of them."""
    return dataclasses.replace(plan, micro_batch_size=-(-plan.micro_batch_size // max(num_gpus, 1)))


def _peak_gib(phases: dict[str, float], budget_gib: float | None) -> float:
    """The largest phase in GiB; with a memory budget, the conditioning phase holds the text
    encoders only where their weights fit ENCODER_BUDGET_SHARE of it (else they encode on the
    CPU: the phase keeps its overhead)."""
    conditioning = phases["conditioning"]
    if (
        budget_gib is not None
        and (conditioning - _OVERHEAD_GB) * 1e9 > ENCODER_BUDGET_SHARE * budget_gib * GIB
    ):
        conditioning = _OVERHEAD_GB
    return max(conditioning, phases["latents"], phases["denoiser"]) * 1e9 / GIB


def _what_fits(cfg: TrainConfig, host: HostInfo) -> str:
    """What the user can change: the plan settings fixed (leave them to a budget), a GPU with bf16
    (for int8 / nf4), the resolution."""
    fixed = [
        f"{name}={getattr(cfg, name)}"
        for name in ("base_precision", "gradient_checkpointing", "offload_blocks", "micro_batch_size")
        if getattr(cfg, name) not in ("auto", None)
    ]
    quantised = "nf4" in host.precisions
    steps = []
    if fixed:
        steps.append(f"leave {', '.join(fixed)} at auto (a budget then measures lighter plans)")
    if not quantised:
        steps.append(
            "this GPU has no bf16, so no int8 / nf4 base: a card of compute capability 8.0+ runs them"
        )
    steps.append(f"train at a lower resolution (now {cfg.resolution})")
    return "; ".join(steps)


def card_problems(
    cfg: TrainConfig, model_dir: Path | None, scan: DatasetScan, host: HostInfo | None = None
) -> list[FieldProblem]:
    """The refusal of a run that even at its lightest plan is forecast over its GPU (`host`, as
    jobs/run_host.host_for_run gives it; None: this host's as the job service places the run)
    (jobs/card_fit.py, "refused"), before any worker starts; [] when it may run (a default plan
    over the GPU is planned by the engine: training/planning/card_plan.py)."""
    from lorastudio.config_host import compile_runs
    from lorastudio.jobs.hardware import host_info
    from lorastudio.jobs.preflight import control_load
    from lorastudio.jobs.run_host import host_for_run

    host = host or host_for_run(host_info(), None, cfg.num_gpus)
    fit = card_fit(
        cfg,
        model_dir,
        host,
        control_load(scan, cfg),
        compiled=compile_runs(cfg.compile, host.device, host.capability),
    )
    return [fit.problem] if fit is not None and fit.problem is not None else []
