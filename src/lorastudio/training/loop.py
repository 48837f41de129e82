"""`train()`: one family-agnostic training run, in phases that keep peak memory low.

  preflight  config, engine settings, output folder, precision, dataset, model source (no I/O)
  attention  auto's kernel probe starts here, in a child process, and works beside phases 1-2
             (training/attention_early.py; a result cached for this GPU and shapes skips it)
  phase 1    text encoders only: encode each unique caption once, free the encoders
             (phases 1-2: training/loop_inputs.py)
  phase 2    VAE only: latent cache (posterior mean/std per crop/flip variant), free the VAE
             (or keep it and encode every step when the cache would exceed its RAM budget);
             latent_cache "disk" (or "auto" above the RAM budget) keeps it on disk across runs
             (training/latents_disk.py)
  plan       how the denoiser phase runs (training/plan.py): the config's settings; with
             memory_budget_gb, the fastest measured plan that fits (after phase 2: trials use
             the run's conditioning and latents); a resume reuses its checkpoint's plan.
             PlanChosen is emitted once, before the first step
  phase 3    denoiser + LoRA (built for the plan: training/plan_build.py): batched,
             gradient-accumulated optimizer steps (training/optimizers.py) in the plan's
             micro-batches, with an LR schedule
  validate   with validation_split: the held-out images encoded in phase 2, their loss measured at
             fixed noise every cfg.validate_every steps and after the last one (training/validate.py)
  samples    with sample prompts (encoded in phase 1): previews rendered with the live LoRA every
             cfg.sample_every steps and after the last one (training/samples.py), SampleReady
  export     outputs/<output_name>/<output_name>.safetensors + .json (staged, then renamed);
             with ema_decay that LoRA holds the EMA weights and <output_name>.raw.safetensors
             (+ .raw.json) the raw ones (training/ema.py)

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

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lorastudio.config import TrainConfig
from lorastudio.data.cache_io import hold_readers
from lorastudio.data.disk_cache import cache_root
from lorastudio.errors import LorastudioError, TrainingStopped
from lorastudio.families.single_file import model_source
from lorastudio.lora.snapshots import SnapshotKeeper, keep_final_as_snapshot
from lorastudio.settings import Settings, get_settings
from lorastudio.timings import PhaseClock
from lorastudio.training.attention import (
    apply_attention,
    prepare_denoiser_attention,
)
from lorastudio.training.attention_early import PendingAttention, run_shapes, start_attention
from lorastudio.training.attention_fa4 import keep_fa4_cache
from lorastudio.training.checkpoint import (
    CheckpointKeeper,
    checkpoint_plan,
    find_checkpoint,
    read_checkpoint_info,
)
from lorastudio.training.compile import keep_compile_cache, wants_compile
from lorastudio.training.conditioning import CaptionPicker
from lorastudio.training.distributed import (
    StopPoll,
    barrier,
    check_parallel_config,
    end_group,
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
    StopCheck,
)
from lorastudio.training.export import export_run
from lorastudio.training.extend import extension_record
from lorastudio.training.loop_inputs import encode_conditioning, prepare_latents, run_latent_mode
from lorastudio.training.noise import make_objective
from lorastudio.training.optimize import RunState, optimize
from lorastudio.training.plan import Plan, plan_event, resolve_fixed_plan, resumed_plan
from lorastudio.training.plan_build import build_denoiser
from lorastudio.training.plan_measure import CudaMeter, DeviceMeter, choose_plan
from lorastudio.training.precision import free_accelerator_memory, pick_dtype, run_numerics
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.run_timings import record_run_timings
from lorastudio.training.samples import SamplePreviews, sample_texts
from lorastudio.training.session import claim_run_dir, clean_after_failure, discard_session, prepare_session
from lorastudio.training.text_encoders import LivePromptConds, load_text_encoder_lora
from lorastudio.training.trackers import TrackerSink


@dataclass
class TrainResult:
    """What a run produced. lora_path is None when stopped without saving (or before any step).
    steps_run and losses count every step of the run, those before a resume included;
    resumed_from is the checkpoint step a resumed run started from (None for a fresh run).
    `denoiser` (the trained denoiser with its LoRA, eval mode) is set only when train() was
    called with return_denoiser=True (with ema_decay: its raw weights; the file holds the EMA's)."""

    lora_path: Path | None
    steps_run: int
    stopped: bool
    losses: list[float]
    denoiser: Any = field(default=None, repr=False, compare=False)
    resumed_from: int | None = None
    text_encoders: Any = field(
        default=None, repr=False, compare=False
    )  # with return_denoiser (train_text_encoder)


def train(
    cfg: TrainConfig,
    emit: Emit,
    should_stop: StopCheck | None = None,
    *,
    settings: Settings | None = None,
    device: str | None = None,
    return_denoiser: bool = False,
    resume: Path | None = None,
    meter: DeviceMeter | None = None,
    started_at: float | None = None,
) -> TrainResult:
    """Run one training job described by `cfg`, reporting through `emit`.

    Takes: the config (as parsed; family defaults are resolved here), the event sink, an
    optional stop poll, the settings (default: this process's), a device ("cpu", "cuda", ...;
    default: CUDA when available), and `resume`: a checkpoint folder, or a run folder (its
    newest checkpoint), to continue from. A resume keeps the checkpoint's run folder and total
    steps; cfg must have the checkpoint's identity (training/identity.py; see
    checkpoint.resume_settings to build it from the checkpoint).
    `meter` is a test hook: the DeviceMeter that measures the plans of a memory budget instead
    of the device's (a plan_measure.FakeDeviceMeter lets the chooser run on the CPU; with it,
    memory_budget_gb is accepted on a CPU host). Leave it None for real runs.
    `started_at`: when the calling process started (timings.process_started_at(); the CLI and the
    job worker pass it): the run's wall-time record counts the process's start (imports) too.
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
    keep_fa4_cache(settings.fa4_cache_dir)  # before FA4 is imported: the run reuses its probe's kernels
    clock = PhaseClock(
        started_at=started_at
    )  # stamps the events: the phases of a finished run are kept (run_timings.py)
    state = RunState()
    run: PreparedRun | None = None
    claimed = False
    stopped = False
    lora_path: Path | None = None
    try:
        state.ctx = launched_context()
        main = state.ctx.is_main
        trackers = TrackerSink(cfg.report_to if main else [])  # report_to (training/trackers.py)
        emit = clock.wrap(trackers.wrap(emit if main else _emit_nothing))
        check_parallel_config(cfg, state.ctx)
        state.resume = find_checkpoint(resume) if resume is not None else None
        run, state.identity = _prepare_session(
            cfg, settings, process_device(device, state.ctx), state.resume, meter
        )
        if state.resume is not None:
            _note_extension(run, state)
        state.ctx = start_group(state.ctx, run.device)
        if wants_compile(run.cfg.compile, run.device):
            keep_compile_cache(settings.compile_cache_dir)
        if state.resume is None:
            barrier(state.ctx)  # every rank's preflight saw the folder free before rank 0 claims it
            if main:
                claim_run_dir(run.run_dir)
        claimed = main
        trackers.open(run.run_dir, run.cfg.model_dump(mode="json"))
        state.keeper = CheckpointKeeper(run.run_dir, run.cfg.save_every, run.cfg.keep_last)
        state.loras = SnapshotKeeper(run.run_dir, run.cfg.save_lora_every, run.cfg.keep_loras)
        save = True
        try:
            with run_numerics(run.cfg.enable_tf32, run.device):
                _run_phases(run, state, emit, StopPoll(should_stop, state.ctx, run.device), meter, settings)
        except TrainingStopped as request:
            stopped, save = True, request.save
        if not main:
            pass  # rank 0 writes (or removes) every file of the run
        elif save and state.steps_run > state.steps_at_start:
            lora_path = export_run(run, state, stopped)
            state.keeper.finish()
        elif not save or state.resume is None:
            if state.previews is not None and state.resume is not None:
                state.previews.discard()  # a fresh run's samples go with its folder
            state.loras.discard()
            if state.validation is not None and state.resume is not None:
                state.validation.discard()  # the record as this session found it
            discard_session(run.run_dir, state.resume is not None, state.keeper)
            claimed = False
    except BaseException as err:
        if claimed and run is not None:
            clean_after_failure(run.run_dir, state.resume is not None)
        emit(Error(message=_message(err, state.attention)))
        raise
    finally:
        if state.swap is not None and return_denoiser:
            state.swap.detach()  # the caller gets a plain model (every block on the device)
        denoiser = state.denoiser
        state.denoiser = state.ddp = state.swap = None
        if state.cache_readers is not None:
            os.close(state.cache_readers)  # releases the cache's readers lock
            state.cache_readers = None
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
    if lora_path is not None and not stopped and state.resume is None and state.plan is not None:
        record_run_timings(run, state, clock, settings)  # the run's end: train() returns now
    resumed_from = state.steps_at_start if state.resume is not None else None
    encoders = state.text_encoders if return_denoiser else None
    return TrainResult(lora_path, state.steps_run, stopped, list(state.losses), kept, resumed_from, encoders)


def _note_extension(run: PreparedRun, state: RunState) -> None:
    """A resume whose total exceeds its checkpoint's trains the run longer (training/extend.py):
    remember it (the schedule is re-spanned after the checkpoint loads) and its record."""
    info = read_checkpoint_info(state.resume)
    longer = run.cfg.num_epochs == 0 and int(run.cfg.steps) > int(info["total_steps"])
    state.extended = longer
    state.extensions = extension_record(info, int(run.cfg.steps) if longer else None)
    if longer and state.ctx.is_main:
        keep_final_as_snapshot(run.run_dir)  # the LoRA of the old total stays, as a snapshot


def _prepare_session(
    cfg: TrainConfig, settings: Settings, device: str | None, resume: Path | None, meter: DeviceMeter | None
) -> tuple[PreparedRun, dict[str, Any]]:
    """session.prepare_session; with a test meter, a memory budget skips the host check (the
    meter stands in for the GPU) and is put back into the prepared config."""
    budget = cfg.memory_budget_gb
    if meter is None or budget is None:
        return prepare_session(cfg, settings, device, resume)
    run, identity = prepare_session(
        cfg.model_copy(update={"memory_budget_gb": None}), settings, device, resume
    )
    return dataclasses.replace(run, cfg=run.cfg.model_copy(update={"memory_budget_gb": budget})), identity


def _emit_nothing(event: object) -> None:
    """The event sink of ranks other than 0."""


def _message(err: BaseException, attention: str = "default") -> str:
    """The Error event's text for `err`; a CUDA illegal memory access while cuDNN attention ran
    (`attention`, the run's kernel) says how to retry without it."""
    if isinstance(err, LorastudioError):
        return str(err)
    if isinstance(err, KeyboardInterrupt):
        return "training interrupted"
    text = f"{type(err).__name__}: {err}"
    if attention == "cudnn" and "illegal memory access" in str(err):
        text += (
            "\n(cuDNN attention was in use; it crashed FLUX.1's step this way on an H200 before the engine "
            "handed it contiguous gradients: "
            'retry with attention_backend = "flash")'
        )
    return text


def _run_phases(
    run: PreparedRun,
    state: RunState,
    emit: Emit,
    stop: StopPoll,
    meter: DeviceMeter | None,
    settings: Settings,
) -> None:
    cfg, family, items = run.cfg, run.family, run.scan.items
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    stop()
    plan, decided_by = _settled_plan(run, state)
    attention = start_attention(
        run, plan, settings.probe_cache_dir
    )  # auto's probe runs beside phases 1-2 (attention_early)
    rng = np.random.default_rng(cfg.seed)  # crops, flips, caption dropout
    # cache variants, timesteps and noise: a CPU generator gives the same draws on any device
    generator = torch.Generator().manual_seed(cfg.seed)
    sees = family.spec.prompt_sees_controls  # encoded per caption + controls (Qwen-Image-Edit)
    if run_latent_mode(run) == "disk":  # no cache clear while this run reads its shards
        state.cache_readers = hold_readers(cache_root(settings))
    conds, prompt_conds, variants, dropouts = encode_conditioning(run, state, emit, stop, settings)
    stop()
    source = prepare_latents(run, state, rng, emit, stop, settings)
    stop()
    objective = make_objective(family, cfg, family.scheduler_config(model_source(cfg), cfg.revision))
    trials: list[Any] = []
    if plan is None:  # a memory budget: measure candidate plans on the run's own data
        plan, trials = choose_plan(
            run, source, conds, objective, rng, meter or CudaMeter(run.device), state.ctx, state.preservation
        )
        decided_by = "measured"
        if run.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(run.device)  # Progress reports the run's peak
        stop()
    # phases 1-2 ran in the config's dtype; the denoiser phase runs in the plan's compute dtype
    # (they differ only where a budget or a resumed plan quantises a base whose default is fp32)
    run = dataclasses.replace(run, dtype=pick_dtype(plan.base_precision, run.device))
    if cfg.train_text_encoder:
        state.text_encoders = load_text_encoder_lora(family, cfg, run.dtype, run.device, emit)
        prompt_conds = LivePromptConds(state.text_encoders, sample_texts(cfg, family))  # type: ignore[assignment]
    if cfg.sample_prompts and state.ctx.is_main:
        state.previews = SamplePreviews(run, prompt_conds)
    params = _prepare_denoiser(run, state, emit, plan, decided_by, trials, attention)
    stop()
    picker = CaptionPicker(
        [vs[0] for vs in variants],
        dropouts,
        rng,
        [it.controls for it in items] if sees else None,
        variants=variants,
    )
    optimize(run, state, source, conds, picker, objective, params, rng, generator, emit, stop)


def _settled_plan(run: PreparedRun, state: RunState) -> tuple[Plan | None, str]:
    """The plan known before any model loads, and how it was decided: a resume's checkpoint plan
    ("checkpoint"), or the config's ("settings"); (None, "measured") when a memory budget will
    choose it. A checkpoint written before plans were recorded resumes with the config's plan."""
    cfg = run.cfg
    if state.resume is not None:
        saved = checkpoint_plan(read_checkpoint_info(state.resume))
        if saved is not None:
            return resumed_plan(Plan.from_dict(saved), cfg), "checkpoint"
        return resolve_fixed_plan(cfg, run.device), "settings"
    if cfg.memory_budget_gb is not None:
        return None, "measured"
    return resolve_fixed_plan(cfg, run.device), "settings"


def _prepare_denoiser(
    run: PreparedRun,
    state: RunState,
    emit: Emit,
    plan: Plan,
    decided_by: str,
    trials: list[Any],
    pending: PendingAttention,
) -> list[torch.nn.Parameter]:
    """Build the denoiser for `plan` (training/plan_build.py), keep it in `state` and emit
    PlanChosen (with the fallbacks known now). Returns the trainable LoRA parameters."""
    cfg = run.cfg
    emit(ModelLoadStarted(component="denoiser"))
    t0 = time.perf_counter()
    built = build_denoiser(run, plan, compile_blocks=wants_compile(cfg.compile, run.device))
    emit(ModelLoadCompleted(component="denoiser", seconds=time.perf_counter() - t0))
    emit(Preparing(phase="denoiser", done=0, total=1))
    state.denoiser, state.lora_config, state.swap = built.denoiser, built.lora_config, built.swap
    state.plan = plan
    attention = pending.result(run.dtype, run_shapes(run, plan, getattr(built.denoiser, "config", {})))
    apply_attention(attention)  # process-wide until run_numerics exits
    prepare_denoiser_attention(built.denoiser, attention)  # cuDNN: contiguous grads; fa4: routing
    state.attention = attention.backend
    if state.ctx.distributed:
        state.ddp = wrap_denoiser(built.denoiser, run.device)  # averages the LoRA gradients over ranks
    emit(
        plan_event(
            plan,
            compiled=built.compiled,
            compile_regions=built.compile_regions,
            memory_budget_gb=cfg.memory_budget_gb,
            decided_by=decided_by,
            trials=trials,
            fallbacks=[*state.notes, *built.fallbacks, *filter(None, [attention.fallback_reason])],
            attention_backend=attention.backend,
            fused_projections=built.fused_groups,
        )
    )
    emit(Preparing(phase="denoiser", done=1, total=1))
    return built.params
