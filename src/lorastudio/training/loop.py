"""`train()`: one family-agnostic training run, in phases that keep peak memory low.

  preflight  config, engine settings, output folder, precision, dataset, model source (no I/O)
  phase 1    text encoders only: encode each unique caption once, free the encoders
  phase 2    VAE only: latent cache (posterior mean/std per crop/flip variant), free the VAE
             (or keep it and encode every step when the cache would exceed its RAM budget)
  phase 3    denoiser + LoRA: batched, gradient-accumulated AdamW steps with an LR schedule
  samples    with sample prompts (encoded in phase 1): previews rendered with the live LoRA every
             cfg.sample_every steps and after the last one (training/samples.py), SampleReady
  export     outputs/<output_name>/<output_name>.safetensors + .json (staged, then renamed)

Checkpoints (outputs/<output_name>/checkpoints/step-N, see training/checkpoint.py) are written
every cfg.save_every steps and on stop-and-save; `train(..., resume=...)` continues a run from one
in the same folder: phases 1-2 rebuild the conditioning and latent cache deterministically from
the seed, then the loop's complete state (LoRA, optimizer, schedule, scaler, sampler position,
meters, every RNG stream) is restored, so the remaining steps are those of an uninterrupted run.

A stop request is honoured between phases, per image while caching and after every step.
Exactly one terminal event is emitted: Complete, or Error (then the exception is re-raised).

Launched by torchrun / accelerate launch (RANK, WORLD_SIZE, LOCAL_RANK set), the run is
data-parallel (training/distributed.py): same maths as one process with the same global batch,
only rank 0 emits events and writes files, and stop requests are agreed on by every rank.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lorastudio.config import TrainConfig
from lorastudio.errors import LorastudioError, TrainingStopped
from lorastudio.settings import Settings, get_settings
from lorastudio.training.checkpoint import CheckpointKeeper, find_checkpoint
from lorastudio.training.conditioning import CaptionPicker, Conditioning, captions_to_encode, encode_texts
from lorastudio.training.distributed import (
    ParallelContext,
    StopPoll,
    all_reduce_sum,
    barrier,
    check_parallel_config,
    end_group,
    gradient_sync,
    launched_context,
    process_device,
    start_group,
    wrap_denoiser,
)
from lorastudio.training.events import (
    Complete,
    Emit,
    Error,
    ModelLoadCompleted,
    ModelLoadStarted,
    Preparing,
    Progress,
    SampleReady,
    StopCheck,
)
from lorastudio.training.export import build_sidecar, save_lora
from lorastudio.training.latents import (
    EncodedPerStep,
    LatentSource,
    build_latent_cache,
    cache_bytes,
)
from lorastudio.training.lora import add_lora, lora_config_for
from lorastudio.training.meter import DivergenceGuard, StepMeter
from lorastudio.training.noise import DdpmObjective, FlowObjective, make_objective
from lorastudio.training.optim import iter_sampler_steps, make_lr_scheduler, make_optimizer, total_steps
from lorastudio.training.precision import free_accelerator_memory, peak_memory_gb, run_numerics
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.samples import SamplePreviews
from lorastudio.training.session import claim_run_dir, clean_after_failure, discard_session, prepare_session
from lorastudio.training.snapshot import LoopParts, load_checkpoint, save_checkpoint


@dataclass
class TrainResult:
    """What a run produced. lora_path is None when stopped without saving (or before any step).
    steps_run and losses count every step of the run, those before a resume included;
    resumed_from is the checkpoint step a resumed run started from (None for a fresh run).
    `denoiser` (the trained denoiser with its LoRA, eval mode) is set only when train() was
    called with return_denoiser=True."""

    lora_path: Path | None
    steps_run: int
    stopped: bool
    losses: list[float]
    denoiser: Any = field(default=None, repr=False, compare=False)
    resumed_from: int | None = None


@dataclass
class _RunState:
    """What the run has built so far (read by the stop/export path)."""

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


def train(
    cfg: TrainConfig,
    emit: Emit,
    should_stop: StopCheck | None = None,
    *,
    settings: Settings | None = None,
    device: str | None = None,
    return_denoiser: bool = False,
    resume: Path | None = None,
) -> TrainResult:
    """Run one training job described by `cfg`, reporting through `emit`.

    Takes: the config (as parsed; family defaults are resolved here), the event sink, an
    optional stop poll, the settings (default: this process's), a device ("cpu", "cuda", ...;
    default: CUDA when available), and `resume`: a checkpoint folder, or a run folder (its
    newest checkpoint), to continue from. A resume keeps the checkpoint's run folder and total
    steps; cfg must have the checkpoint's identity (training/identity.py; see
    checkpoint.resume_settings to build it from the checkpoint).
    Returns: TrainResult. A stop with save after >= 1 step of this session writes a checkpoint
    and the LoRA of the steps run. A stop without save removes what this session wrote: the
    whole run folder for a fresh run, this session's checkpoints for a resumed one.
    Raises (after emitting Error): ConfigError (also: a resume whose identity differs, naming
    each differing field), NotFound (no checkpoint), DatasetError, PathOutsideRoot,
    ModelSourceError for user mistakes, TrainingDiverged, or whatever unexpected error
    occurred. Data-parallel: ConfigError when cfg.num_gpus is not the launched world size or
    batch_size does not divide by it; ranks other than 0 emit nothing and return lora_path None. On any failure this session's partial outputs are removed, except checkpoints:
    a run folder that holds one is kept, resumable.
    """
    settings = settings or get_settings()
    state = _RunState()
    run: PreparedRun | None = None
    claimed = False
    stopped = False
    lora_path: Path | None = None
    try:
        state.ctx = launched_context()
        main = state.ctx.is_main
        emit = emit if main else _emit_nothing
        check_parallel_config(cfg, state.ctx)
        state.resume = find_checkpoint(resume) if resume is not None else None
        run, state.identity = prepare_session(cfg, settings, process_device(device, state.ctx), state.resume)
        state.ctx = start_group(state.ctx, run.device)
        if state.resume is None:
            barrier(state.ctx)  # every rank's preflight saw the folder free before rank 0 claims it
            if main:
                claim_run_dir(run.run_dir)
        claimed = main
        state.keeper = CheckpointKeeper(run.run_dir, run.cfg.save_every, run.cfg.keep_last)
        save = True
        try:
            with run_numerics(run.cfg.enable_tf32, run.device):
                _run_phases(run, state, emit, StopPoll(should_stop, state.ctx, run.device))
        except TrainingStopped as request:
            stopped, save = True, request.save
        if not main:
            pass  # rank 0 writes (or removes) every file of the run
        elif save and state.steps_run > state.steps_at_start:
            lora_path = _export(run, state, stopped)
            state.keeper.finish()
        elif not save or state.resume is None:
            if state.previews is not None and state.resume is not None:
                state.previews.discard()  # a fresh run's samples go with its folder
            discard_session(run.run_dir, state.resume is not None, state.keeper)
            claimed = False
    except BaseException as err:
        if claimed and run is not None:
            clean_after_failure(run.run_dir, state.resume is not None)
        emit(Error(message=_message(err)))
        raise
    finally:
        denoiser = state.denoiser
        state.denoiser = state.ddp = None
        end_group(state.ctx)
    emit(
        Complete(lora_path=str(lora_path) if lora_path else None, steps_run=state.steps_run, stopped=stopped)
    )
    if denoiser is not None:
        denoiser.eval()
    kept = denoiser if return_denoiser else None
    del denoiser
    if run is not None:
        free_accelerator_memory(run.device)
    resumed_from = state.steps_at_start if state.resume is not None else None
    return TrainResult(lora_path, state.steps_run, stopped, list(state.losses), kept, resumed_from)


def _emit_nothing(event: object) -> None:
    """The event sink of ranks other than 0."""


def _message(err: BaseException) -> str:
    if isinstance(err, LorastudioError):
        return str(err)
    if isinstance(err, KeyboardInterrupt):
        return "training interrupted"
    return f"{type(err).__name__}: {err}"


def _export(run: PreparedRun, state: _RunState, stopped: bool) -> Path:
    cfg = run.cfg
    name = str(cfg.output_name)
    sidecar = build_sidecar(
        cfg,
        steps_run=state.steps_run,
        total_steps=state.total_steps,
        stopped=stopped,
        dataset_root=run.scan.root,
        dataset_fingerprint=run.scan.fingerprint,
        num_images=len(run.scan.items),
        lora_file=f"{name}.safetensors",
    )
    return save_lora(run.run_dir, name, run.family.spec, state.denoiser, state.lora_config, sidecar)


def _run_phases(run: PreparedRun, state: _RunState, emit: Emit, stop: StopPoll) -> None:
    cfg, family, items = run.cfg, run.family, run.scan.items
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    stop()
    rng = np.random.default_rng(cfg.seed)  # crops, flips, caption dropout
    # cache variants, timesteps and noise: a CPU generator gives the same draws on any device
    generator = torch.Generator().manual_seed(cfg.seed)
    captions = [it.caption for it in items]
    texts = [captions_to_encode(captions, cfg.caption_dropout), list(dict.fromkeys(cfg.sample_prompts))]
    conds, prompt_conds = encode_texts(
        family, cfg, texts, dtype=run.dtype, device=run.device, emit=emit, check_stop=stop
    )  # the sample prompts in chunks of their own: the captions' tensors are those of a run without
    if cfg.sample_prompts and state.ctx.is_main:
        state.previews = SamplePreviews(run, prompt_conds)
    stop()
    source = _prepare_latents(run, rng, emit, stop)
    stop()
    objective = make_objective(family, cfg, family.scheduler_config(cfg.base_model, cfg.revision))
    params = _prepare_denoiser(run, state, emit)
    stop()
    picker = CaptionPicker(captions, cfg.caption_dropout, rng)
    _optimize(run, state, source, conds, picker, objective, params, rng, generator, emit, stop)


def _prepare_latents(run: PreparedRun, rng: np.random.Generator, emit: Emit, stop: StopPoll) -> LatentSource:
    cfg, family, items = run.cfg, run.family, run.scan.items
    emit(ModelLoadStarted(component="vae"))
    t0 = time.perf_counter()
    vae = family.load_vae(cfg.base_model, cfg.revision, run.dtype, run.device)
    emit(ModelLoadCompleted(component="vae", seconds=time.perf_counter() - t0))
    spec = family.spec
    need = cache_bytes(
        [it.bucket for it in items], int(cfg.cache_variants), spec.latent_channels, spec.vae_scale_factor
    )
    if need > cfg.latent_cache_max_gb * 1024**3:
        return EncodedPerStep(family, vae, items, cfg, rng)  # keeps the VAE for the whole run
    try:
        return build_latent_cache(family, vae, items, cfg, rng, device=run.device, emit=emit, check_stop=stop)
    finally:
        del vae
        free_accelerator_memory(run.device)


def _prepare_denoiser(run: PreparedRun, state: _RunState, emit: Emit) -> list[torch.nn.Parameter]:
    cfg, family = run.cfg, run.family
    emit(ModelLoadStarted(component="denoiser"))
    t0 = time.perf_counter()
    denoiser = family.load_denoiser(cfg.base_model, cfg.revision, run.dtype, run.device)
    emit(ModelLoadCompleted(component="denoiser", seconds=time.perf_counter() - t0))
    emit(Preparing(phase="denoiser", done=0, total=1))
    if cfg.gradient_checkpointing:
        denoiser.enable_gradient_checkpointing()
    torch.manual_seed(cfg.seed)  # LoRA A init and LoRA dropout masks
    lora_config = lora_config_for(cfg, family.spec.lora_targets)
    params = add_lora(denoiser, lora_config)
    denoiser.train()
    from lorastudio.training.compile import compile_denoiser, wants_compile

    if wants_compile(cfg.compile, run.device):
        compile_denoiser(denoiser, params)  # lazy; a compiler failure later falls back to eager
    state.denoiser, state.lora_config = denoiser, lora_config
    if state.ctx.distributed:
        state.ddp = wrap_denoiser(denoiser, run.device)  # averages the LoRA gradients over ranks
    emit(Preparing(phase="denoiser", done=1, total=1))
    return params


def _optimize(
    run: PreparedRun,
    state: _RunState,
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
        loss = 0.0
        for i, micro in enumerate(group):
            with gradient_sync(state.ddp, sync=i == len(group) - 1):  # all-reduce once per step
                loss += _micro_step(
                    run, state, source, conds, picker, objective, micro, samples, generator, scaler
                )
        loss = all_reduce_sum(loss, state.ctx, run.device)  # the global step loss on every rank
        scaler.unscale_(optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
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


def _checkpoint(run: PreparedRun, state: _RunState, parts: LoopParts) -> None:
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
    state: _RunState,
    source: LatentSource,
    conds: Conditioning,
    picker: CaptionPicker,
    objective: DdpmObjective | FlowObjective,
    indices: list[int],
    step_samples: int,
    generator: torch.Generator,
    scaler: torch.amp.GradScaler,
) -> float:
    """Forward + backward of one micro-batch; gradients are scaled so the optimizer step sees the
    mean over all `step_samples` of the step. Returns this micro-batch's share of the step loss
    (data-parallel: this rank's part of it, for its slice of the micro-batch)."""
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
    return float(share)  # the one host sync of a micro-step (see training/step.py)
