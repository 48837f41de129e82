"""The memory plan of a run: base precision, activation checkpointing, block swap, micro-batch.

Without `memory_budget_gb` the plan is the config's, every field left at auto taking its plain
default (`resolve_fixed_plan`): precision auto = bf16 on a bf16-capable GPU, else fp32;
checkpointing off; no block swap; micro-batch = batch_size.

With `memory_budget_gb` the fields left at auto are chosen by MEASURING real steps of candidate
plans (training/planning/plan_measure.py runs them; this module is the search, torch-free). Candidates
vary only the fields left at auto (explicit settings are kept):

  precision  the plain default (bf16 / fp32) > int8 > nf4 (quantised bases dequantise per
             matmul: less memory, more time). fp8 is NEVER chosen by a budget: it changes the
             numerics of the forward (fp8 matmuls), so it must be asked for explicitly.
  memory     one chain of settings, each step saving memory and costing time (`memory_chain`):
             micro-batch halves (batch_size, /2, ... 1), then checkpointing (off > selective >
             full), then block swap (a quarter, half, three quarters, all of the repeated blocks;
             CUDA only). Micro-batches come first: at the resolutions where memory runs short the
             GPU is saturated by one sample, so splitting a batch costs little, while recomputing
             activations costs 20-35% of a step.

The search (`PlanSearch`) assumes what the order expresses: down the chain, and from one
precision to the next, the peak memory never rises and a step never gets faster. Then:
  1. the plain plan (default precision, chain start) is measured first: if it fits it is the
     fastest of all, done;
  2. the lightest plan (last precision, chain end) next: if even it does not fit, nothing does
     (ConfigError naming the smallest measured peak);
  3. per precision, fastest first, a binary search over the chain finds the first setting that
     fits (the precision's fastest plan), searching only the chain before the best plan found so
     far (the same settings at a slower precision cannot be faster) and before any setting of this
     precision already measured slower than the best; a precision that fits at the chain start
     ends the search (the next precisions are slower);
  4. at most `max_trials` measurements in all; the plan is the fastest measured one whose peak
     is within the budget.
About 2 + log2(chain length) trials per precision. Compile is not part of the measured plan:
trials run eagerly (regional compile only lowers memory, so a plan that fits eagerly fits
compiled).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from lorastudio.config_host import memory_budget_problems, offload_problems
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.events import PlanChosen, PlanTrial

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

GIB = 1024**3
CHECKPOINTING_LADDER = ("off", "selective", "full")
QUANTISED_LADDER = ("int8", "nf4")  # after the plain precision; fp8 is never chosen by a budget
SWAP_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the repeated blocks, on CUDA
DEFAULT_MAX_TRIALS = 8  # measurements in all (each builds a denoiser and runs 3 steps)


@dataclass(frozen=True)
class Plan:
    """How the denoiser phase runs. Every field is resolved (no "auto"): base_precision one of
    fp32/bf16/fp16/fp8/int8/nf4; gradient_checkpointing off/selective/full; offload_blocks the
    repeated blocks kept in CPU RAM; micro_batch_size the samples per forward/backward."""

    base_precision: str
    gradient_checkpointing: str
    offload_blocks: int
    micro_batch_size: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """The plan of `as_dict` (a checkpoint's). Raises ConfigError (field "resume") when a
        value is missing or malformed."""
        try:
            plan = cls(
                base_precision=str(data["base_precision"]),
                gradient_checkpointing=str(data["gradient_checkpointing"]),
                offload_blocks=int(data["offload_blocks"]),
                micro_batch_size=int(data["micro_batch_size"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError([FieldProblem("resume", f"malformed plan in the checkpoint: {err}")]) from None
        valid = (
            plan.base_precision in ("fp32", "bf16", "fp16", "fp8", "int8", "nf4")
            and plan.gradient_checkpointing in CHECKPOINTING_LADDER
            and plan.offload_blocks >= 0
            and plan.micro_batch_size >= 1
        )
        if not valid:
            raise ConfigError([FieldProblem("resume", f"malformed plan in the checkpoint: {data}")])
        return plan

    def trial(
        self, seconds_per_sample: float | None, peak_bytes: int | None, fits: bool, note: str | None = None
    ) -> PlanTrial:
        """This plan as a measured PlanTrial."""
        return PlanTrial(
            **self.as_dict(),
            seconds_per_sample=seconds_per_sample,
            peak_memory_gb=None if peak_bytes is None else peak_bytes / GIB,
            fits=fits,
            note=note,
        )


def plain_precision(device: torch.device) -> str:
    """What base_precision auto means without a budget: bf16 on a bf16-capable GPU, else fp32."""
    import torch

    from lorastudio.training.precision import pick_dtype

    return "bf16" if pick_dtype("auto", device) == torch.bfloat16 else "fp32"


def resolve_fixed_plan(cfg: TrainConfig, device: torch.device) -> Plan:
    """The plan of a run without a memory budget: the config's values, each field left at auto
    taking its plain default (precision: `plain_precision`; checkpointing off; no block swap;
    micro-batch = batch_size)."""
    precision = cfg.base_precision if cfg.base_precision != "auto" else plain_precision(device)
    return Plan(
        base_precision=precision,
        gradient_checkpointing="off" if cfg.gradient_checkpointing == "auto" else cfg.gradient_checkpointing,
        offload_blocks=cfg.offload_blocks or 0,
        micro_batch_size=cfg.micro_batch_size or cfg.batch_size,
    )


def resumed_plan(saved: Plan, cfg: TrainConfig) -> Plan:
    """The plan of a resume: the checkpoint's, except the memory settings the resume sets
    explicitly (checkpointing, block swap, micro-batch do not change the maths). The precision
    is always the checkpoint's."""
    return Plan(
        base_precision=saved.base_precision,
        gradient_checkpointing=saved.gradient_checkpointing
        if cfg.gradient_checkpointing == "auto"
        else cfg.gradient_checkpointing,
        offload_blocks=saved.offload_blocks if cfg.offload_blocks is None else cfg.offload_blocks,
        micro_batch_size=saved.micro_batch_size if cfg.micro_batch_size is None else cfg.micro_batch_size,
    )


def plan_host_problems(cfg: TrainConfig, device_type: str) -> list[FieldProblem]:
    """Plan settings this host cannot honour (empty when it can), for the engine's preflight and
    the job service: memory_budget_gb measures GPU memory, so it needs CUDA; offload_blocks > 0
    needs CUDA (the rules are config_host's). Takes the device type ("cuda", "cpu"); no torch."""
    return memory_budget_problems(cfg.memory_budget_gb, device_type) + offload_problems(
        cfg.offload_blocks, device_type
    )


def micro_batch_ladder(batch_size: int, world_size: int = 1) -> list[int]:
    """batch_size, then its halves while even, then 1; only sizes of at least one sample per
    data-parallel process."""
    sizes = [batch_size]
    while sizes[-1] % 2 == 0 and sizes[-1] > 1:
        sizes.append(sizes[-1] // 2)
    if sizes[-1] != 1:
        sizes.append(1)
    return [m for m in sizes if m >= world_size] or [batch_size]


def swap_ladder(block_count: int) -> list[int]:
    """0, then SWAP_FRACTIONS of the repeated blocks (distinct, at least 1)."""
    levels = [0]
    for fraction in SWAP_FRACTIONS:
        k = max(1, round(block_count * fraction))
        if block_count and k not in levels:
            levels.append(k)
    return levels


@dataclass(frozen=True)
class Ladders:
    """The values each plan field may take in a search, fastest-and-heaviest first (one value
    for a field the config fixes)."""

    precisions: tuple[str, ...]
    checkpointing: tuple[str, ...]
    offload: tuple[int, ...]
    micro_batches: tuple[int, ...]


def block_swap_searchable(cfg: TrainConfig, device_type: str) -> bool:
    """Whether a budgeted run may try block swap: offload_blocks left at auto, a CUDA device, and
    not with compile "wide" (the swappable blocks sit inside its compiled regions, where the swap
    hooks cannot run; config_rules refuses the two together when offload_blocks is set)."""
    return cfg.offload_blocks is None and device_type == "cuda" and cfg.compile != "wide"


def plan_ladders(
    cfg: TrainConfig,
    plain: str,
    *,
    runnable: Callable[[str], bool],
    block_count: int,
    swap_possible: bool,
    world_size: int = 1,
) -> Ladders:
    """The ladders of a budgeted run: the fields left at auto get their ladder, the others their
    configured value. Takes the plain precision (`plain_precision`), `runnable(precision)` (the
    device can run it: training/precision.py), the denoiser's repeated-block count and whether
    block swap can run here (CUDA)."""
    if cfg.base_precision == "auto":
        precisions = (plain, *(p for p in QUANTISED_LADDER if runnable(p)))
    else:
        precisions = (cfg.base_precision,)
    if cfg.gradient_checkpointing == "auto":
        checkpointing = CHECKPOINTING_LADDER
    else:
        checkpointing = (cfg.gradient_checkpointing,)
    if cfg.offload_blocks is None:
        offload = tuple(swap_ladder(block_count)) if swap_possible else (0,)
    else:
        offload = (cfg.offload_blocks,)
    if cfg.micro_batch_size is None:
        micro = tuple(micro_batch_ladder(cfg.batch_size, world_size))
    else:
        micro = (cfg.micro_batch_size,)
    return Ladders(precisions, checkpointing, offload, micro)


def memory_chain(ladders: Ladders) -> list[tuple[int, str, int]]:
    """The (offload_blocks, gradient_checkpointing, micro_batch_size) settings of the search, from
    the fastest to the lightest: micro-batch halves, then checkpointing, then block swap (module
    docstring); each step changes one field by one rung of its ladder."""
    offload, checkpointing, micro = ladders.offload[0], ladders.checkpointing[0], ladders.micro_batches[0]
    chain = [(offload, checkpointing, micro)]
    for micro in ladders.micro_batches[1:]:
        chain.append((offload, checkpointing, micro))
    for checkpointing in ladders.checkpointing[1:]:
        chain.append((offload, checkpointing, micro))
    for offload in ladders.offload[1:]:
        chain.append((offload, checkpointing, micro))
    return chain


Point = tuple[int, int]  # (precision index, memory chain index)


class PlanSearch:
    """The search of the module docstring over `ladders` for the fastest plan within
    `budget_bytes`. `run(measure)` calls `measure(plan) -> PlanTrial` (fits decided by the
    measurer against the budget) and returns (chosen plan, trials in measuring order).
    Raises ConfigError (memory_budget_gb) when no measured plan fits."""

    def __init__(self, ladders: Ladders, budget_bytes: int, max_trials: int = DEFAULT_MAX_TRIALS):
        self.ladders = ladders
        self.chain = memory_chain(ladders)
        self.budget_bytes = budget_bytes
        self.max_trials = max(2, max_trials)
        self.measured: dict[Point, PlanTrial] = {}

    def plan(self, point: Point) -> Plan:
        offload, checkpointing, micro = self.chain[point[1]]
        return Plan(self.ladders.precisions[point[0]], checkpointing, offload, micro)

    def run(self, measure: Callable[[Plan], PlanTrial]) -> tuple[Plan, list[PlanTrial]]:
        lightest = (len(self.ladders.precisions) - 1, len(self.chain) - 1)
        if not self._fits((0, 0), measure) and lightest != (0, 0) and self._fits(lightest, measure):
            self._search(measure)
        best = self._best()
        if best is None:
            raise ConfigError([FieldProblem("memory_budget_gb", self._nothing_fits())])
        return self.plan(best), list(self.measured.values())

    def _search(self, measure: Callable[[Plan], PlanTrial]) -> None:
        limit = len(self.chain)  # chain settings at or after it cannot beat the best plan
        for p in range(len(self.ladders.precisions)):
            lo, hi, first = 0, limit, None
            while lo < min(hi, self._slow_from(p)) and len(self.measured) < self.max_trials:
                mid = (lo + min(hi, self._slow_from(p))) // 2
                if self._fits((p, mid), measure):
                    first = hi = mid
                else:
                    lo = mid + 1
            if first is not None:
                limit = first
            if first == 0 or len(self.measured) >= self.max_trials:
                return

    def _fits(self, point: Point, measure: Callable[[Plan], PlanTrial]) -> bool:
        if point not in self.measured:
            self.measured[point] = measure(self.plan(point))
        return self.measured[point].fits

    def _best(self) -> Point | None:
        fitting = [pt for pt, t in self.measured.items() if t.fits and t.seconds_per_sample is not None]
        return min(fitting, key=lambda pt: self.measured[pt].seconds_per_sample or 0.0, default=None)

    def _slow_from(self, p: int) -> int:
        """The first chain index of precision p measured no faster than the best plan (every
        setting from there on is slower still); the chain length when there is none."""
        best = self._best()
        if best is None:
            return len(self.chain)
        fastest = self.measured[best].seconds_per_sample or 0.0
        slow = [
            i
            for (q, i), t in self.measured.items()
            if q == p
            and (q, i) != best
            and t.seconds_per_sample is not None
            and t.seconds_per_sample >= fastest
        ]
        return min(slow, default=len(self.chain))

    def _nothing_fits(self) -> str:
        budget = self.budget_bytes / GIB
        peaks = [t.peak_memory_gb for t in self.measured.values() if t.peak_memory_gb is not None]
        tried = len(self.measured)
        if peaks:
            return (
                f"no plan fits {budget:.3g} GB: the smallest measured peak was {min(peaks):.3g} GB "
                f"({tried} plans measured, the lightest included); raise the budget or lower the "
                "resolution / batch_size"
            )
        return (
            f"no plan fits {budget:.3g} GB: every measured plan ({tried}, the lightest included) ran "
            "out of device memory; raise the budget or lower the resolution / batch_size"
        )


def plan_event(
    plan: Plan,
    *,
    compiled: bool,
    compile_regions: str = "",
    memory_budget_gb: float | None,
    decided_by: str,
    trials: Iterable[PlanTrial] = (),
    fallbacks: Iterable[str] = (),
    attention_backend: str = "default",
    fused_projections: int = 0,
) -> PlanChosen:
    """The PlanChosen event of a run's plan."""
    return PlanChosen(
        **plan.as_dict(),
        compile=compiled,
        compile_regions=compile_regions if compiled else "",
        attention_backend=attention_backend,
        fused_projections=fused_projections,
        memory_budget_gb=memory_budget_gb,
        decided_by=decided_by,  # type: ignore[arg-type]
        trials=list(trials),
        fallbacks=list(fallbacks),
    )
