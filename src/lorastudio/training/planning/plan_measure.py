"""Measuring plans: device meters and the trial runner behind a memory budget (training/planning/plan.py
holds the search).

A trial builds a FRESH denoiser for the candidate plan (training/planning/plan_build.py, the run's own
build path, compile off), then runs 1 warm-up + 2 timed optimizer steps of the run's real shapes:
one sampler batch of the dataset's largest batch group (bucket and control count) with its captions' conditioning, the real
`batch_forward_backward` (training/planning/micro_batches.py: micro-batches, training.step.forward_backward,
the preservation pass and prior targets of a run with differential output preservation) and an
AdamW step. It reports seconds per sample and the peak device memory, then frees
everything. Out of memory (torch.OutOfMemoryError) means "does not fit"; the trial is freed and
the search goes on. Trials use their own random streams: the run's draws are unchanged.

`DeviceMeter` is what a trial needs from the device: `CudaMeter` for a GPU, `FakeDeviceMeter`
for CPU tests (it counts the live bytes of CPU tensors through a TorchDispatchMode and raises
torch.OutOfMemoryError above a capacity), so the chooser's logic runs for real on tiny models.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from lorastudio.errors import ConfigError
from lorastudio.families.single_file import config_of, model_source
from lorastudio.hub_token import hub_kwargs
from lorastudio.training.events import PlanTrial
from lorastudio.training.inputs.conditioning import item_key
from lorastudio.training.planning.plan import (
    GIB,
    Plan,
    PlanSearch,
    block_swap_searchable,
    plain_precision,
    plan_ladders,
)
from lorastudio.training.precision import free_accelerator_memory, pick_dtype, precision_problems

if TYPE_CHECKING:
    from lorastudio.data.preservation_texts import PreservationTexts
    from lorastudio.training.distributed import ParallelContext
    from lorastudio.training.inputs.conditioning import Conditioning
    from lorastudio.training.inputs.latents import LatentBatch, LatentSource
    from lorastudio.training.noise import DdpmObjective, FlowObjective
    from lorastudio.training.preflight import PreparedRun

WARMUP_STEPS = 1
TIMED_STEPS = 2


class DeviceMeter(Protocol):
    """What a plan trial needs from its device. `tracking()` is entered around each trial;
    `peak_bytes()` is the peak since the last `reset_peak()`; `build_done()` is called once the
    trial's denoiser is built; `release()` frees cached memory."""

    device: torch.device

    def tracking(self) -> contextlib.AbstractContextManager[None]: ...
    def reset_peak(self) -> None: ...
    def build_done(self) -> None: ...
    def synchronize(self) -> None: ...
    def peak_bytes(self) -> int: ...
    def release(self) -> None: ...


class CudaMeter:
    """A CUDA device: peak = torch.cuda.max_memory_reserved (what the process took from the GPU,
    the caching allocator's slack included, so a plan that fits here fits on the card)."""

    def __init__(self, device: torch.device):
        self.device = device

    def tracking(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def build_done(self) -> None:
        """The build's own peak (e.g. quantising layer by layer on the GPU) counts: nothing to do."""

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def peak_bytes(self) -> int:
        return int(torch.cuda.max_memory_reserved(self.device))

    def release(self) -> None:
        free_accelerator_memory(self.device)


class FakeDeviceMeter:
    """A pretend accelerator for CPU tests: inside `tracking()`, every storage of a CPU tensor an
    op reads or makes counts as device memory until it is freed (model weights count from their
    first use, quantised tensors by their inner tensors); going above `capacity_bytes` raises
    torch.OutOfMemoryError like a full GPU. `peak_bytes()` is the largest live total since
    `reset_peak()` or `build_done()`: a build stages the base in CPU RAM before placing it on the
    device (quantised bases, block swap), and here both are the CPU, so the peak restarts from
    what the built model holds."""

    def __init__(self, capacity_bytes: int | None = None):
        self.device = torch.device("cpu")
        self.capacity_bytes = capacity_bytes
        self.live = 0
        self.peak = 0
        self._refs: dict[int, weakref.ref[torch.UntypedStorage]] = {}

    def tracking(self) -> contextlib.AbstractContextManager[None]:
        return _CountingMode(self)

    def reset_peak(self) -> None:
        self.peak = self.live

    def build_done(self) -> None:
        self.peak = self.live

    def synchronize(self) -> None:
        """Nothing to wait for on the CPU."""

    def peak_bytes(self) -> int:
        return self.peak

    def release(self) -> None:
        gc.collect()

    def count(self, tensor: torch.Tensor) -> None:
        """Count the storages of `tensor` (inner tensors of a wrapper subclass) not yet counted;
        raise torch.OutOfMemoryError when the live total passes the capacity."""
        if is_traceable_wrapper_subclass(tensor):
            names, _ = tensor.__tensor_flatten__()
            for name in names:
                inner = getattr(tensor, name)
                if isinstance(inner, torch.Tensor):
                    self.count(inner)
            return
        if tensor.device.type != "cpu" or tensor.is_meta:
            return
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self._refs:
            return
        nbytes = storage.nbytes()
        self._refs[key] = weakref.ref(storage, lambda _ref, k=key, n=nbytes: self._forget(k, n))
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        if self.capacity_bytes is not None and self.live > self.capacity_bytes:
            raise torch.OutOfMemoryError(
                f"fake device out of memory: {self.live} bytes live > capacity {self.capacity_bytes}"
            )

    def _forget(self, key: int, nbytes: int) -> None:
        if self._refs.pop(key, None) is not None:
            self.live -= nbytes


class _CountingMode(TorchDispatchMode):
    """Counts the tensors every aten op reads and makes into a FakeDeviceMeter."""

    def __init__(self, meter: FakeDeviceMeter):
        super().__init__()
        self.meter = meter

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        inputs, _ = tree_flatten((args, kwargs or {}))
        for t in inputs:
            if isinstance(t, torch.Tensor):
                self.meter.count(t)
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.meter.count(t)
        return out


@dataclass(frozen=True)
class TrialInputs:
    """One sampler batch of the run's largest batch group, drawn once for every trial: latents fp32
    [B, C, h, w] (with their crop info) and the collated conditioning of their captions; with
    differential output preservation, the class conditioning and weight of its pass (`preserve`)
    and the samples whose target is the base prediction (`prior` [B] bool), as the run's step."""

    batch: LatentBatch
    cond: dict[str, Any]
    preserve: tuple[dict[str, Any], float] | None = None
    prior: torch.Tensor | None = None


def trial_inputs(
    run: PreparedRun,
    source: LatentSource,
    conds: Conditioning,
    rng: np.random.Generator,
    preservation: PreservationTexts | None = None,
) -> TrialInputs:
    """batch_size items of the largest batch group (by pixels, the control images' included:
    their tokens join the sequence; repeated when the group has fewer), sampled with a private
    generator; the run's numpy stream `rng` is left as it was. A group is a bucket and a control
    count (DatasetScan.batch_keys): a batch never mixes them. `preservation`: the run's
    (training/preservation.py; its texts are in `conds`): the trials run its pass, which costs a
    DOP step about twice the plain step's time and more memory."""
    from lorastudio.training.preservation import preservation_cond, prior_mask

    items = run.scan.items
    from lorastudio.data.items import batch_key_pixels

    keys = run.scan.batch_keys()  # (width, height, controls, control sizes...) per item
    largest = max(keys, key=lambda k: (batch_key_pixels(k), k))
    members = [i for i, key in enumerate(keys) if key == largest]
    indices = (members * math.ceil(run.cfg.batch_size / len(members)))[: run.cfg.batch_size]
    saved = rng.bit_generator.state
    try:
        generator = torch.Generator().manual_seed(run.cfg.seed)
        batch = source.sample(indices, generator, torch.float32, torch.device("cpu"))
    finally:
        rng.bit_generator.state = saved
    latents = batch.latents.detach().to("cpu", torch.float32)  # [B, C, h, w]
    cond = run.family.collate_conditioning([conds[item_key(run.family, items[i])] for i in indices])
    captions = [items[i].caption for i in indices]
    preserve = preservation_cond(preservation, run.family, conds, captions, indices)
    return TrialInputs(replace(batch, latents=latents), cond, preserve, prior_mask(run.scan, indices))


def measure_plan(
    plan: Plan,
    run: PreparedRun,
    inputs: TrialInputs,
    objective: DdpmObjective | FlowObjective,
    meter: DeviceMeter,
    ctx: ParallelContext,
) -> PlanTrial:
    """One trial of `plan` (module docstring). Returns its PlanTrial: fits = no out-of-memory and
    peak <= the run's memory_budget_gb. Raises what the build or a step raises other than
    torch.OutOfMemoryError (e.g. ModelSourceError)."""
    from lorastudio.training.optim import make_optimizer
    from lorastudio.training.planning.micro_batches import batch_forward_backward
    from lorastudio.training.planning.plan_build import BuiltDenoiser, build_denoiser

    cfg = run.cfg
    budget = None if cfg.memory_budget_gb is None else int(cfg.memory_budget_gb * GIB)
    samples = TIMED_STEPS * cfg.batch_size
    seconds: float | None = None
    note: str | None = None
    built: BuiltDenoiser | None = None
    meter.release()
    meter.reset_peak()
    try:
        with meter.tracking():
            trial_run = replace(run, dtype=pick_dtype(plan.base_precision, run.device))
            built = build_denoiser(trial_run, plan, compile_blocks=False)
            meter.build_done()
            latents = inputs.batch.latents.to(run.device, trial_run.dtype)  # [B, C, h, w]
            batch = replace(inputs.batch, latents=latents)
            optimizer = make_optimizer(built.params, cfg)
            scaler = torch.amp.GradScaler(run.device.type, enabled=trial_run.dtype == torch.float16)
            generator = torch.Generator().manual_seed(cfg.seed)
            start = 0.0
            for step in range(WARMUP_STEPS + TIMED_STEPS):
                if step == WARMUP_STEPS:
                    meter.synchronize()
                    start = time.perf_counter()
                batch_forward_backward(
                    run.family, built.denoiser, objective, batch, inputs.cond, cfg, generator,
                    cfg.batch_size, scaler, plan.micro_batch_size, ctx=ctx,
                    preserve=inputs.preserve, prior=inputs.prior,
                )  # fmt: skip
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            meter.synchronize()
            seconds = (time.perf_counter() - start) / samples
            del optimizer, batch, latents
    except torch.OutOfMemoryError as err:
        note = "out of memory: " + (str(err).strip().splitlines() or ["(no message)"])[0][:200]
    finally:
        if built is not None:
            built.release()
        built = None
        meter.release()
    if note is not None:
        return plan.trial(None, None, False, note)
    peak = meter.peak_bytes()
    return plan.trial(seconds, peak, budget is None or peak <= budget)


def repeated_block_count(run: PreparedRun) -> int:
    """How many repeated blocks the run's denoiser has (built on the meta device: no weights)."""
    import diffusers

    from lorastudio.training.speed.compile import repeated_blocks

    spec, cfg = run.family.spec, run.cfg
    cls = getattr(diffusers, spec.denoiser_class)
    config = cls.load_config(
        config_of(model_source(cfg)), subfolder=spec.denoiser, revision=cfg.revision, **hub_kwargs()
    )
    with torch.device("meta"):
        model = cls.from_config(config)
    return len(repeated_blocks(model))


def choose_plan(
    run: PreparedRun,
    source: LatentSource,
    conds: Conditioning,
    objective: DdpmObjective | FlowObjective,
    rng: np.random.Generator,
    meter: DeviceMeter,
    ctx: ParallelContext,
    preservation: PreservationTexts | None = None,
) -> tuple[Plan, list[PlanTrial]]:
    """The fastest plan within the run's memory_budget_gb (training/planning/plan.py's search over the
    fields left at auto), and the trials measured. A data-parallel run adopts rank 0's result
    (every rank measures on its own device; the maths must be the same on every rank).
    `preservation`: the run's differential output preservation (trial_inputs): measured too.
    Raises ConfigError (memory_budget_gb) when no plan fits."""
    cfg, device = run.cfg, run.device
    swap_possible = block_swap_searchable(cfg, device.type)
    ladders = plan_ladders(
        cfg,
        plain_precision(device),
        runnable=lambda p: not precision_problems(p, device),
        block_count=repeated_block_count(run) if swap_possible else 0,
        swap_possible=swap_possible,
        world_size=ctx.world_size,
    )
    inputs = trial_inputs(run, source, conds, rng, preservation)
    search = PlanSearch(ladders, int(float(cfg.memory_budget_gb or 0) * GIB))
    outcome: tuple[Plan | None, list[PlanTrial], list[Any]]
    try:
        plan, trials = search.run(lambda p: measure_plan(p, run, inputs, objective, meter, ctx))
        outcome = (plan, trials, [])
    except ConfigError as err:
        outcome = (None, list(search.measured.values()), list(err.problems))
    if ctx.distributed:
        outcome = _rank0_outcome(outcome)
    plan_or_none, trials, problems = outcome
    if plan_or_none is None:
        raise ConfigError(problems)
    return plan_or_none, trials


def _rank0_outcome(outcome: tuple[Any, ...]) -> Any:
    """Rank 0's (plan, trials, problems) on every rank."""
    import torch.distributed as dist

    box = [outcome]
    dist.broadcast_object_list(box, src=0)
    return box[0]
