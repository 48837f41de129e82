"""The optimizer-step loop of a run (phase 3 of training/loop.py): batches from the bucket
sampler, gradient accumulation, clipping, the divergence guard, the LR schedule, progress events,
sample previews, checkpoints and the stop poll after every step. Resumed runs restore every piece
of loop state (training/resume/snapshot.py) before the first step. Micro-batches: training/planning/micro_batches.py.

Pipelined steps (CUDA, one process, bf16/fp32, fused AdamW): the host reads a step's loss and
gradient norm only after the NEXT step's forward/backward is queued, so the GPU never waits for
the host between steps; a non-finite step is skipped by the device (fused AdamW's found_inf: the
divergence guard's rule) and counted when its values arrive. Steps with a checkpoint or sample
round, and the last step, are read at once (they need the state of that step, its RNG streams
included). A stop request read while the next step is queued lands after that step (it is
recorded, and saved when asked). Same maths as the unpipelined loop (tests/unit/training/
test_pipelined.py). fp16 loss scaling and data-parallel runs read every step before the update.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lorastudio.errors import TrainingStopped
from lorastudio.lora.snapshots import SnapshotKeeper
from lorastudio.training.adapters.export import save_ema_step_lora, save_lora_snapshot
from lorastudio.training.distributed import ParallelContext, StopPoll, all_reduce_sum
from lorastudio.training.ema import AdapterEma, make_ema
from lorastudio.training.ema_preview import keep_preview_ema
from lorastudio.training.events import Emit, Progress, RunWarning
from lorastudio.training.inputs.conditioning import CaptionPicker, Conditioning
from lorastudio.training.inputs.latents import LatentSource
from lorastudio.training.loop_end import finish_run, sample_round
from lorastudio.training.meter import DivergenceGuard, StepMeter
from lorastudio.training.noise import DdpmObjective, FlowObjective
from lorastudio.training.optim import (
    iter_sampler_steps,
    make_lr_scheduler,
    make_optimizer,
    total_steps,
    undecayed_magnitudes,
)
from lorastudio.training.optimizers import step_size
from lorastudio.training.planning.micro_batches import batch_forward_backward, entry_loss_weights
from lorastudio.training.planning.plan import Plan
from lorastudio.training.planning.run_timings import compile_cache_counts
from lorastudio.training.precision import peak_memory_gb
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.preservation import preservation_cond, prior_mask
from lorastudio.training.resume.checkpoint import CheckpointKeeper, read_checkpoint_info
from lorastudio.training.resume.extend import respan_schedule
from lorastudio.training.resume.loss_record import LossRecord
from lorastudio.training.resume.machine_record import device_name, dtype_path
from lorastudio.training.resume.snapshot import LoopParts, load_checkpoint, save_checkpoint
from lorastudio.training.samples import SamplePreviews
from lorastudio.training.speed.first_step_report import log_first_step_compile
from lorastudio.training.speed.precompile import end_first_step
from lorastudio.training.step_in_flight import StepInFlight, fused_adam
from lorastudio.training.validate import HeldOut, ValidationRounds, validation_round

if TYPE_CHECKING:
    from lorastudio.data.preservation_texts import PreservationTexts
    from lorastudio.training.adapters.text_encoders import TextEncoderLora


PIPELINED_DEVICES = ("cuda",)  # where a step is queued before the last one's values are read


@dataclass
class RunState:
    """What the run has built so far: read by the stop/export path of train(), updated by
    the optimizer loop."""

    steps_run: int = 0
    total_steps: int = 0
    losses: LossRecord = field(default_factory=LossRecord)  # every step's (training/resume/loss_record.py)
    denoiser: Any = None
    lora_config: Any = None
    resume: Path | None = None  # the checkpoint this session continues from
    steps_at_start: int = 0  # steps done before this session (the checkpoint's step)
    keeper: CheckpointKeeper | None = None
    extensions: list[dict[str, Any]] = field(default_factory=list)  # training/resume/extend.py's record
    extended: bool = False  # this session trains the run longer than the checkpoint's total
    loras: SnapshotKeeper | None = None  # LoRA snapshots (every checkpoint, every save_lora_every)
    identity: dict[str, Any] = field(default_factory=dict)
    checkpointed_step: int | None = None  # step of this session's latest checkpoint
    previews: SamplePreviews | None = None  # set when the config has sample prompts (rank 0)
    ctx: ParallelContext = field(default_factory=ParallelContext)
    ddp: Any = None  # the DDP wrapper of the denoiser in a data-parallel run
    plan: Plan | None = None  # how the denoiser phase runs (training/planning/plan.py)
    swap: Any = None  # the BlockSwap of the denoiser when the plan offloads blocks
    run_lock: int | None = None  # rank 0's lock on the run folder (training/resume/run_lock.py)
    cache_readers: int | None = None  # a disk-cached run's hold on the cache (data/cache_io.hold_readers)
    cache_entries: list[int] = field(default_factory=list)  # its holds on the entries it reads (hold_entry)
    notes: list[str] = field(default_factory=list)  # what the phases before the denoiser could not do
    attention: str = "default"  # the SDPA kernel of the denoiser phase (training/speed/attention.py)
    ema: AdapterEma | None = None  # the adapter EMA (cfg.ema_decay): the exported LoRA is its weights
    validation: ValidationRounds | None = None  # the validation rounds (cfg.validation_split)
    held_out: list[HeldOut] = field(default_factory=list)  # the encoded validation images
    held_out_conds: Conditioning = field(default_factory=dict)  # their captions' conditioning
    text_encoders: TextEncoderLora | None = None  # SDXL train_text_encoder: encoders with their LoRA
    preservation: PreservationTexts | None = None  # cfg.preservation's texts (training/preservation.py)
    # Inductor's cache hits / misses when the run began (training/planning/run_timings.compile_cache_state)
    compile_counts: dict[str, int] = field(default_factory=compile_cache_counts)
    latents_encoded: int | None = None  # images phase 2 encoded (None: every image; the disk cache: fewer)
    text_tokens: float | None = None  # a non-padding family's mean text tokens a caption (run_timings.py)
    # writes the run's LoRA after its last step (train() sets it on rank 0; loop_end.finish_run calls it)
    final_save: Callable[[], None] | None = None
    final_lora: Path | None = None  # the run's LoRA, once final_save wrote it


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
    from lorastudio.data.entries import run_sampler

    cfg = run.cfg
    sampler = run_sampler(run.scan, cfg.batch_size, cfg.seed)  # the entries' repeats / weights
    num_steps = total_steps(cfg, len(sampler))
    state.total_steps = num_steps
    te = state.text_encoders
    undecayed = undecayed_magnitudes(state.identity, state.denoiser)  # DoRA's, under its rule
    optimizer = make_optimizer(params, cfg, te.params if te is not None else None, undecayed)
    trained = [*params, *(te.params if te is not None else [])]  # clipped and averaged together
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
        ema=make_ema(state.denoiser, trained, cfg, te.named_parameters() if te is not None else None),
        text_encoders=te,
        device_type=run.device.type,
        device_name=device_name(run.device),  # recorded in each checkpoint, compared on a resume (1873)
        dtype_path=dtype_path(run.dtype),
    )
    state.ema = parts.ema
    if state.resume is not None:  # every stream continues where the interrupted run left it
        state.steps_run, notes = load_checkpoint(state.resume, parts, state.losses)
        for note in notes:  # the run goes on: losses the file lacked (NaN), another thread count or machine
            emit(RunWarning(step=state.steps_run, message=note))
        if state.extended:  # the LR from here on is the new total's schedule (training/resume/extend.py)
            respan_schedule(parts.scheduler)
        state.steps_at_start = state.checkpointed_step = state.steps_run
        if state.validation is not None:  # the rounds before the checkpoint, as the run recorded them
            state.validation.restore(
                read_checkpoint_info(state.resume).get("validation", []), state.steps_run
            )
            best = state.validation.best
            if state.loras is not None and best is not None:  # keep_loras keeps it from the start
                state.loras.protected = int(best["step"])
    clip = cfg.max_grad_norm if cfg.max_grad_norm is not None else math.inf
    pipelined = (
        run.device.type in PIPELINED_DEVICES
        and not parts.scaler.is_enabled()
        and not state.ctx.distributed
        and fused_adam(optimizer)
    )
    steps = iter_sampler_steps(sampler, cfg.grad_accum, by_epoch=cfg.num_epochs > 0)
    in_flight: StepInFlight | None = None  # a pipelined step whose host values are not read yet
    for epoch, group in steps:
        step = (in_flight.step if in_flight is not None else state.steps_run) + 1
        lr = step_size(optimizer, float(parts.scheduler.get_last_lr()[0]))  # Prodigy: d * lr
        samples = sum(len(b) for b in group)
        shares: list[torch.Tensor] = []  # 0-d device tensors: no host sync inside the micro-steps
        for i, micro in enumerate(group):
            last = i == len(group) - 1  # DDP all-reduces once per step, in its last backward
            shares += _micro_step(
                run, state, source, conds, picker, objective, micro, samples, generator, parts.scaler, last
            )
        parts.scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(trained, clip)  # [] on the device
        values = torch.stack([torch.stack(shares).double().sum(), norm.double()])  # [2] loss, norm
        flight = StepInFlight(step, epoch, lr, samples, values)
        if pipelined:
            flight.apply_on_device(optimizer, parts.scheduler, parts.ema)
        if in_flight is not None:  # the previous step, read now that this one is queued
            try:
                _record(run, state, parts, in_flight, num_steps, emit)
                stop()
            except TrainingStopped as request:  # this step is queued whole: finish it, then stop
                _record(run, state, parts, flight, num_steps, emit)
                _save_for_stop(request, run, state, parts)
                raise
            in_flight = None
        snapshot_due = state.loras is not None and state.loras.due(step, num_steps)
        validating = state.validation is not None and state.validation.due(step, num_steps)
        due = (
            (state.keeper is not None and state.keeper.due(step, num_steps))
            or (state.previews is not None and state.previews.due(step, num_steps))
            or snapshot_due
            or validating
        )
        if pipelined and not due and step < num_steps:
            in_flight = flight  # its host values are read after the next step is queued
            continue
        _record(run, state, parts, flight, num_steps, emit)
        if step >= num_steps:  # its validation round (the final sidecar records it), LoRA, samples
            if validating:  # no snapshot of its own: the final LoRA is that one
                validation_round(run, state, objective, step, emit)
            finish_run(run, state, parts, source, emit)
            break
        checkpoint_due = state.keeper is not None and state.keeper.due(step, num_steps)
        with parts.meter.rounds():  # not the steps' pace (samples/s)
            if state.previews is not None and state.previews.due(step, num_steps):
                sample_round(cfg, state.previews, state, parts, source, step, emit)
                if not (checkpoint_due and parts.guard.bad_in_a_row == 0):  # a checkpoint keeps them
                    keep_preview_ema(run, state)
            if validating:  # with its LoRA snapshot
                validation_round(run, state, objective, step, emit)
            if checkpoint_due and parts.guard.bad_in_a_row == 0:
                _checkpoint(run, state, parts)  # with its LoRA snapshot
            elif snapshot_due:
                _lora_snapshot(run, state)
        try:
            stop()
        except TrainingStopped as request:
            _save_for_stop(request, run, state, parts)
            raise


def _record(
    run: PreparedRun, state: RunState, parts: LoopParts, flight: StepInFlight, num_steps: int, emit: Emit
) -> None:
    """Read `flight`'s loss and gradient norm, apply its update when it is not queued yet (the
    guard decides; TrainingDiverged after max_bad_steps bad steps in a row), count the step and
    emit its Progress event."""
    loss, grad_norm = flight.read()  # the step's one host sync (pipelined: long done)
    loss = all_reduce_sum(loss, state.ctx, run.device)  # the global step loss on every rank
    scaler = parts.scaler
    ok = parts.guard.check(flight.step, loss, None if scaler.is_enabled() else grad_norm)
    if not ok and (note := parts.guard.skip_note(flight.step, loss, grad_norm)) is not None:
        emit(RunWarning(step=flight.step, message=note))  # the record and the run's log say so
    if not flight.applied:
        if ok:
            scaler.step(parts.optimizer)  # a skipped (non-finite) step leaves the weights as they were
        scaler.update()
        if parts.ema is not None:  # a skipped step counts too (training/ema.py)
            parts.ema.update(flight.step)
        parts.optimizer.zero_grad(set_to_none=True)
        parts.scheduler.step()
    state.steps_run = flight.step
    state.losses.append(loss)
    parts.meter.step_done(loss, flight.samples)
    if parts.meter.session_steps == 1:  # where its compile's time went
        log_first_step_compile(parts.meter.first_step_seconds or 0.0)
        end_first_step()  # later shapes: the ordinary compile (training/speed/precompile.py)
    emit(
        Progress(
            step=flight.step,
            total_steps=num_steps,
            epoch=flight.epoch + 1,
            loss=loss,
            avg_loss=parts.meter.avg_loss,
            lr=flight.lr,
            grad_norm=grad_norm,
            samples_per_second=parts.meter.samples_per_second,
            peak_memory_gb=peak_memory_gb(run.device),
            skipped_steps=parts.guard.skipped,
        )
    )


def _save_for_stop(request: TrainingStopped, run: PreparedRun, state: RunState, parts: LoopParts) -> None:
    """A stop with save checkpoints the last step run, unless that step already has one."""
    if request.save and state.checkpointed_step != state.steps_run:
        _checkpoint(run, state, parts)


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
        plan=state.plan.as_dict() if state.plan is not None else None,
        extensions=state.extensions,
        validation=state.validation.series if state.validation is not None else None,
        # EMA: the step's EMA weights as a LoRA file in the checkpoint (pruned with it)
        beside=(lambda folder: save_ema_step_lora(run, state, folder)) if state.ema is not None else None,
    )
    state.checkpointed_step = state.steps_run
    if state.keeper is not None:
        state.keeper.record(path)
    _lora_snapshot(run, state)


def _lora_snapshot(run: PreparedRun, state: RunState) -> None:
    """Write the LoRA snapshot of the step just done (rank 0) and apply keep_loras."""
    if not state.ctx.is_main or state.loras is None:
        return
    path = save_lora_snapshot(
        run, state.denoiser, state.lora_config, step=state.steps_run, total_steps=state.total_steps,
        extensions=state.extensions, text_encoders=state.text_encoders,
    )  # fmt: skip
    if path is not None:
        state.loras.record(path)


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
    last: bool,
) -> list[torch.Tensor]:
    """Forward + backward of one sampler batch (in the plan's micro-batches); gradients are scaled
    so the optimizer step sees the mean over all `step_samples` of the step. Returns the shares
    of the step loss as 0-d device tensors (data-parallel: this rank's part of them). `last`: the
    step's last batch (DDP all-reduces the gradients in its last backward)."""
    batch = source.sample(indices, generator, run.dtype, run.device)
    captions = picker.pick(indices)
    if state.text_encoders is not None:  # encoded now, through the text encoders' LoRA
        cond = state.text_encoders.encode(captions)
    else:
        cond = run.family.collate_conditioning([conds[c] for c in captions])
    micro = (
        state.plan.micro_batch_size if state.plan is not None else run.cfg.micro_batch_size or len(indices)
    )
    return batch_forward_backward(
        run.family, state.denoiser, objective, batch, cond, run.cfg, generator, step_samples,
        scaler, micro, ctx=state.ctx, ddp=state.ddp, sync=last,
        loss_weights=entry_loss_weights(run.scan, indices),
        preserve=preservation_cond(state.preservation, run.family, conds, captions, indices),
        prior=prior_mask(run.scan, indices),
    )  # fmt: skip
