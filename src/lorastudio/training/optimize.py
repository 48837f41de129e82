"""The optimizer-step loop of a run (phase 3 of training/loop.py): batches from the bucket
sampler, gradient accumulation, clipping, the divergence guard, the LR schedule, progress events,
sample previews, checkpoints and the stop poll after every step. Resumed runs restore every piece
of loop state (training/snapshot.py) before the first step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lorastudio.errors import TrainingStopped
from lorastudio.training.checkpoint import CheckpointKeeper
from lorastudio.training.conditioning import CaptionPicker, Conditioning
from lorastudio.training.distributed import ParallelContext, StopPoll, all_reduce_sum, gradient_sync
from lorastudio.training.events import Emit, Progress, SampleReady
from lorastudio.training.latents import LatentSource
from lorastudio.training.meter import DivergenceGuard, StepMeter
from lorastudio.training.noise import DdpmObjective, FlowObjective
from lorastudio.training.optim import iter_sampler_steps, make_lr_scheduler, make_optimizer, total_steps
from lorastudio.training.precision import peak_memory_gb
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.samples import SamplePreviews
from lorastudio.training.snapshot import LoopParts, load_checkpoint, save_checkpoint


@dataclass
class RunState:
    """What the run has built so far: read by the stop/export path of train(), updated by
    the optimizer loop."""

    steps_run: int = 0
    total_steps: int = 0
    losses: list[float] = field(default_factory=list)
    denoiser: Any = None
    lora_config: Any = None
    resume: Path | None = None  # the checkpoint this session continues from
    steps_at_start: int = 0  # steps done before this session (the checkpoint's step)
    keeper: CheckpointKeeper | None = None
    identity: dict[str, Any] = field(default_factory=dict)
    checkpointed_step: int | None = None  # step of this session's latest checkpoint
    previews: SamplePreviews | None = None  # set when the config has sample prompts (rank 0)
    ctx: ParallelContext = field(default_factory=ParallelContext)
    ddp: Any = None  # the DDP wrapper of the denoiser in a data-parallel run


def optimize(
    run: PreparedRun,
    state: RunState,
    source: LatentSource,
    conds: Conditioning,
    picker: CaptionPicker,
    objective: DdpmObjective | FlowObjective,
    params: list[torch.nn.Parameter],
    rng: np.random.Generator,
    generator: torch.Generator,
    emit: Emit,
    stop: StopPoll,
) -> None:
    from lorastudio.data import BucketBatchSampler

    cfg = run.cfg
    sampler = BucketBatchSampler([it.bucket for it in run.scan.items], cfg.batch_size, cfg.seed)
    num_steps = total_steps(cfg, len(sampler))
    state.total_steps = num_steps
    optimizer = make_optimizer(params, cfg)
    parts = LoopParts(
        denoiser=state.denoiser,
        optimizer=optimizer,
        scheduler=make_lr_scheduler(optimizer, cfg, num_steps),
        scaler=torch.amp.GradScaler(run.device.type, enabled=run.dtype == torch.float16),
        sampler=sampler,
        meter=StepMeter(),
        guard=DivergenceGuard(cfg.max_bad_steps),
        rng=rng,
        generator=generator,
    )
    if state.resume is not None:  # every stream continues where the interrupted run left it
        state.steps_run, state.losses = load_checkpoint(state.resume, parts)
        state.steps_at_start = state.checkpointed_step = state.steps_run
    scheduler, scaler, meter, guard = parts.scheduler, parts.scaler, parts.meter, parts.guard
    clip = cfg.max_grad_norm if cfg.max_grad_norm is not None else math.inf
    steps = iter_sampler_steps(sampler, cfg.grad_accum, by_epoch=cfg.num_epochs > 0)
    for epoch, group in steps:
        lr = float(scheduler.get_last_lr()[0])
        samples = sum(len(b) for b in group)
        shares = []  # 0-d device tensors: no host sync inside the micro-steps
        for i, micro in enumerate(group):
            with gradient_sync(state.ddp, sync=i == len(group) - 1):  # all-reduce once per step
                shares.append(
                    _micro_step(
                        run, state, source, conds, picker, objective, micro, samples, generator, scaler
                    )
                )
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(params, clip)  # [] on the device
        # the step's one host sync: its loss (sum of the micro-batch shares) and gradient norm
        loss, grad_norm = torch.stack([torch.stack(shares).double().sum(), norm.double()]).tolist()
        loss = all_reduce_sum(loss, state.ctx, run.device)  # the global step loss on every rank
        step = state.steps_run + 1
        if guard.check(step, loss, None if scaler.is_enabled() else grad_norm):
            scaler.step(optimizer)  # a skipped (non-finite) step leaves the weights as they were
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        state.steps_run = step
        state.losses.append(loss)
        meter.step_done(loss, samples)
        emit(
            Progress(
                step=step,
                total_steps=num_steps,
                epoch=epoch + 1,
                loss=loss,
                avg_loss=meter.avg_loss,
                lr=lr,
                grad_norm=grad_norm,
                samples_per_second=meter.samples_per_second,
                peak_memory_gb=peak_memory_gb(run.device),
                skipped_steps=guard.skipped,
            )
        )
        if state.previews is not None and state.previews.due(step, num_steps):
            images = state.previews.render(state.denoiser, step, vae=getattr(source, "vae", None))
            emit(SampleReady(step=step, images=images))
        if step >= num_steps:
            break
        if state.keeper is not None and state.keeper.due(step, num_steps) and guard.bad_in_a_row == 0:
            _checkpoint(run, state, parts)
        try:
            stop()
        except TrainingStopped as request:
            if request.save and state.checkpointed_step != state.steps_run:
                _checkpoint(run, state, parts)
            raise


def _checkpoint(run: PreparedRun, state: RunState, parts: LoopParts) -> None:
    """Write the checkpoint of the step just done and apply keep_last to this session's ones
    (rank 0 only: the other ranks of a data-parallel run hold the same state)."""
    if not state.ctx.is_main:
        state.checkpointed_step = state.steps_run
        return
    path = save_checkpoint(
        run.run_dir,
        parts,
        step=state.steps_run,
        total_steps=state.total_steps,
        losses=state.losses,
        identity=state.identity,
        config=run.cfg.model_dump(mode="json"),
    )
    state.checkpointed_step = state.steps_run
    if state.keeper is not None:
        state.keeper.record(path)


def _micro_step(
    run: PreparedRun,
    state: RunState,
    source: LatentSource,
    conds: Conditioning,
    picker: CaptionPicker,
    objective: DdpmObjective | FlowObjective,
    indices: list[int],
    step_samples: int,
    generator: torch.Generator,
    scaler: torch.amp.GradScaler,
) -> torch.Tensor:
    """Forward + backward of one micro-batch; gradients are scaled so the optimizer step sees the
    mean over all `step_samples` of the step. Returns this micro-batch's share of the step loss as
    a 0-d device tensor (data-parallel: this rank's part of it, for its slice of the micro-batch)."""
    batch = source.sample(indices, generator, run.dtype, run.device)
    cond = run.family.collate_conditioning([conds[c] for c in picker.pick(indices)])
    info = {
        "original_size": batch.original_size,
        "crop_top_left": batch.crop_top_left,
        "target_size": batch.target_size,
    }
    from lorastudio.training.step import forward_backward

    shard = state.ctx.shard(len(indices)) if state.ctx.distributed else None
    share = forward_backward(
        run.family,
        state.denoiser,
        objective,
        batch.latents,
        cond,
        info,
        run.cfg,
        generator,
        step_samples,
        scaler,
        shard=shard,
        forward_module=state.ddp,
    )  # [] on the device
    return share  # [] on the device; the loop reads the step's shares back once per step
