"""`train()`: one family-agnostic training run, in phases that keep peak memory low.

  preflight  config, engine settings, output folder, precision, dataset, model source (no I/O)
  phase 1    text encoders only: encode each unique caption once, free the encoders
  phase 2    VAE only: latent cache (posterior mean/std per crop/flip variant), free the VAE
             (or keep it and encode every step when the cache would exceed its RAM budget)
  phase 3    denoiser + LoRA: batched, gradient-accumulated AdamW steps with an LR schedule
  export     outputs/<output_name>/<output_name>.safetensors + .json (staged, then renamed)

A stop request is honoured between phases, per image while caching and after every step.
Exactly one terminal event is emitted: Complete, or Error (then the exception is re-raised).
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError, FieldProblem, LorastudioError, TrainingStopped
from lorastudio.settings import Settings, get_settings
from lorastudio.training.conditioning import CaptionPicker, Conditioning, captions_to_encode, encode_captions
from lorastudio.training.events import (
    Complete,
    Emit,
    Error,
    ModelLoadCompleted,
    ModelLoadStarted,
    Preparing,
    Progress,
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
from lorastudio.training.optim import iter_optimizer_steps, make_lr_scheduler, make_optimizer, total_steps
from lorastudio.training.precision import free_accelerator_memory, peak_memory_gb, run_numerics
from lorastudio.training.preflight import PreparedRun, preflight


@dataclass
class TrainResult:
    """What a run produced. lora_path is None when stopped without saving (or before any step).
    `denoiser` (the trained denoiser with its LoRA, eval mode) is set only when train() was
    called with return_denoiser=True."""

    lora_path: Path | None
    steps_run: int
    stopped: bool
    losses: list[float]
    denoiser: Any = field(default=None, repr=False, compare=False)


@dataclass
class _RunState:
    """What the run has built so far (read by the stop/export path)."""

    steps_run: int = 0
    total_steps: int = 0
    losses: list[float] = field(default_factory=list)
    denoiser: Any = None
    lora_config: Any = None


class _Stopper:
    """Polls the StopCheck; raises TrainingStopped(save) when a stop was requested."""

    def __init__(self, should_stop: StopCheck | None):
        self.should_stop = should_stop

    def __call__(self) -> None:
        request = self.should_stop() if self.should_stop is not None else None
        if request is not None:
            raise TrainingStopped(request.save)


def train(
    cfg: TrainConfig,
    emit: Emit,
    should_stop: StopCheck | None = None,
    *,
    settings: Settings | None = None,
    device: str | None = None,
    return_denoiser: bool = False,
) -> TrainResult:
    """Run one training job described by `cfg`, reporting through `emit`.

    Takes: the config (as parsed; family defaults are resolved here), the event sink, an
    optional stop poll, the settings (default: this process's), a device ("cpu", "cuda", ...;
    default: CUDA when available).
    Returns: TrainResult. A stop with save after >= 1 step writes the LoRA of the steps run;
    a stop without save removes the run's output folder.
    Raises (after emitting Error): ConfigError, DatasetError, PathOutsideRoot, ModelSourceError
    for user mistakes, TrainingDiverged, or whatever unexpected error occurred. On any failure
    the run's partial output folder is removed.
    """
    settings = settings or get_settings()
    state = _RunState()
    run: PreparedRun | None = None
    claimed = False
    stopped = False
    lora_path: Path | None = None
    try:
        run = preflight(cfg, settings, device)
        _claim(run.run_dir)
        claimed = True
        save = True
        try:
            with run_numerics(run.cfg.enable_tf32, run.device):
                _run_phases(run, state, emit, _Stopper(should_stop))
        except TrainingStopped as request:
            stopped, save = True, request.save
        if save and state.steps_run > 0:
            lora_path = _export(run, state, stopped)
        else:
            shutil.rmtree(run.run_dir)
            claimed = False
    except BaseException as err:
        if claimed and run is not None:
            shutil.rmtree(run.run_dir, ignore_errors=True)
        emit(Error(message=_message(err)))
        raise
    finally:
        denoiser = state.denoiser
        state.denoiser = None
    emit(
        Complete(lora_path=str(lora_path) if lora_path else None, steps_run=state.steps_run, stopped=stopped)
    )
    if denoiser is not None:
        denoiser.eval()
    kept = denoiser if return_denoiser else None
    del denoiser
    if run is not None:
        free_accelerator_memory(run.device)
    return TrainResult(lora_path, state.steps_run, stopped, list(state.losses), kept)


def _message(err: BaseException) -> str:
    if isinstance(err, LorastudioError):
        return str(err)
    if isinstance(err, KeyboardInterrupt):
        return "training interrupted"
    return f"{type(err).__name__}: {err}"


def _claim(run_dir: Path) -> None:
    """Create the run's output folder; a folder created meanwhile by someone else is a ConfigError."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise ConfigError(
            [FieldProblem("output_name", f"{run_dir} already exists; choose another output_name")]
        ) from None


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


def _run_phases(run: PreparedRun, state: _RunState, emit: Emit, stop: _Stopper) -> None:
    cfg, family, items = run.cfg, run.family, run.scan.items
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    stop()
    rng = np.random.default_rng(cfg.seed)  # crops, flips, caption dropout
    # cache variants, timesteps and noise: a CPU generator gives the same draws on any device
    generator = torch.Generator().manual_seed(cfg.seed)
    captions = [it.caption for it in items]
    conds = encode_captions(
        family,
        cfg,
        captions_to_encode(captions, cfg.caption_dropout),
        dtype=run.dtype,
        device=run.device,
        emit=emit,
        check_stop=stop,
    )
    stop()
    source = _prepare_latents(run, rng, emit, stop)
    stop()
    objective = make_objective(family, cfg, family.scheduler_config(cfg.base_model, cfg.revision))
    params = _prepare_denoiser(run, state, emit)
    stop()
    picker = CaptionPicker(captions, cfg.caption_dropout, rng)
    _optimize(run, state, source, conds, picker, objective, params, generator, emit, stop)


def _prepare_latents(run: PreparedRun, rng: np.random.Generator, emit: Emit, stop: _Stopper) -> LatentSource:
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
    state.denoiser, state.lora_config = denoiser, lora_config
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
    generator: torch.Generator,
    emit: Emit,
    stop: _Stopper,
) -> None:
    from lorastudio.data import BucketBatchSampler

    cfg = run.cfg
    sampler = BucketBatchSampler([it.bucket for it in run.scan.items], cfg.batch_size, cfg.seed)
    num_steps = total_steps(cfg, len(sampler))
    state.total_steps = num_steps
    optimizer = make_optimizer(params, cfg)
    scheduler = make_lr_scheduler(optimizer, cfg, num_steps)
    scaler = torch.amp.GradScaler(run.device.type, enabled=run.dtype == torch.float16)
    meter, guard = StepMeter(), DivergenceGuard()
    clip = cfg.max_grad_norm if cfg.max_grad_norm is not None else math.inf
    steps = iter_optimizer_steps(sampler.epoch_batches, cfg.grad_accum, by_epoch=cfg.num_epochs > 0)
    for epoch, group in steps:
        lr = float(scheduler.get_last_lr()[0])
        samples = sum(len(b) for b in group)
        loss = sum(
            _micro_step(
                run, state.denoiser, source, conds, picker, objective, micro, samples, generator, scaler
            )
            for micro in group
        )
        scaler.unscale_(optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        step = state.steps_run + 1
        if guard.check(step, loss, None if scaler.is_enabled() else grad_norm):
            scaler.step(optimizer)
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
            )
        )
        if step >= num_steps:
            break
        stop()


def _micro_step(
    run: PreparedRun,
    denoiser: Any,
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
    mean over all `step_samples` of the step. Returns this micro-batch's share of the step loss."""
    batch = source.sample(indices, generator, run.dtype, run.device)
    cond = run.family.collate_conditioning([conds[c] for c in picker.pick(indices)])
    noised = objective.noise(batch.latents, generator)
    info = {
        "original_size": batch.original_size,
        "crop_top_left": batch.crop_top_left,
        "target_size": batch.target_size,
    }
    pred = run.family.predict(denoiser, noised.noisy, noised.noise_level, cond, info, run.cfg)  # [B, C, h, w]
    per_sample = ((pred.float() - noised.target) ** 2).mean(dim=(1, 2, 3)) * noised.weight  # [B]
    share = per_sample.sum() / step_samples
    scaler.scale(share).backward()
    return float(share.detach())
