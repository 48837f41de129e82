"""The phases of one training run after its session is prepared (training/loop.py's `train`
owns the session, the terminal event and the result): phases 1-2 (conditioning, latents:
training/loop_inputs.py), the plan (fixed, a checkpoint's, or measured under a memory budget), the
denoiser built for it with the attention kernel applied, and the optimizer steps
(training/optimize.py). Split out of loop.py to keep each file short; behaviour unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np
import torch

from lorastudio.data.cache_io import hold_readers
from lorastudio.data.disk_cache import cache_root
from lorastudio.families.single_file import model_source
from lorastudio.settings import Settings
from lorastudio.training.adapters.text_encoders import LivePromptConds, load_text_encoder_lora
from lorastudio.training.distributed import StopPoll, wrap_denoiser
from lorastudio.training.events import Emit, ModelLoadCompleted, ModelLoadStarted, Preparing, RunWarning
from lorastudio.training.inputs.conditioning import CaptionPicker
from lorastudio.training.inputs.latents_disk import hold_latent_entry_early
from lorastudio.training.loop_inputs import encode_conditioning, prepare_latents, run_latent_mode
from lorastudio.training.noise import make_objective
from lorastudio.training.optimize import RunState, optimize
from lorastudio.training.planning.plan import Plan, plan_event, resolve_fixed_plan, resumed_plan
from lorastudio.training.planning.plan_build import build_denoiser
from lorastudio.training.planning.plan_measure import CudaMeter, DeviceMeter, choose_plan
from lorastudio.training.precision import pick_dtype
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.resume.checkpoint import checkpoint_plan, read_checkpoint_info
from lorastudio.training.resume.identity_base import settle_base
from lorastudio.training.samples import SamplePreviews, sample_texts
from lorastudio.training.speed.attention import apply_attention, prepare_denoiser_attention
from lorastudio.training.speed.attention_early import PendingAttention, run_shapes, start_attention
from lorastudio.training.speed.compile import wants_compile
from lorastudio.training.speed.denoiser_early import EarlyDenoiser, start_denoiser


def run_phases(
    run: PreparedRun,
    state: RunState,
    emit: Emit,
    stop: StopPoll,
    meter: DeviceMeter | None,
    settings: Settings,
) -> None:
    """Phases 1-3 of `run` (the module docstring of training/loop.py): conditioning, latents,
    the plan (measured under a memory budget), the denoiser with its LoRA, then the optimizer
    steps (training/optimize.py), honouring `stop` between them."""
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    stop()
    plan, decided_by = _settled_plan(run, state)
    attention = start_attention(
        run, plan, settings.probe_cache_dir
    )  # auto's probe runs beside phases 1-2 (attention_early)
    early = start_denoiser(run, plan, emit, settings.early_denoiser)  # its copy beside phases 1-2
    try:
        _inputs_and_steps(run, state, emit, stop, meter, settings, plan, decided_by, attention, early)
    finally:
        if early is not None:
            early.close()  # a stop or an error before the join: the thread ends, the buffer goes


def _inputs_and_steps(
    run: PreparedRun,
    state: RunState,
    emit: Emit,
    stop: StopPoll,
    meter: DeviceMeter | None,
    settings: Settings,
    plan: Plan | None,
    decided_by: str,
    attention: PendingAttention,
    early: EarlyDenoiser | None,
) -> None:
    """run_phases after the plan is settled and the early starts are made."""
    cfg, family, items = run.cfg, run.family, run.scan.items
    stop()
    rng = np.random.default_rng(cfg.seed)  # crops, flips, caption dropout
    # cache variants, timesteps and noise: a CPU generator gives the same draws on any device
    generator = torch.Generator().manual_seed(cfg.seed)
    sees = family.spec.prompt_sees_controls  # encoded per caption + controls (Qwen-Image-Edit)
    if run_latent_mode(run) == "disk":  # no cache clear while this run reads its shards
        state.cache_readers = hold_readers(cache_root(settings))
        hold_latent_entry_early(run.cfg, cache_root(settings), state.cache_entries)  # nor a prune
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
        if run.init_lora is not None:  # the init file's text-encoder layers (training/adapters/init_lora.py)
            from lorastudio.training.adapters.init_lora_text import load_init_text_encoders

            if (note := load_init_text_encoders(state.text_encoders, run.init_lora, cfg)) is not None:
                logging.getLogger(__name__).warning("%s", note)
                emit(RunWarning(step=state.steps_run, message=note))
        prompt_conds = LivePromptConds(state.text_encoders, sample_texts(cfg, family))  # type: ignore[assignment]
    if cfg.sample_prompts and state.ctx.is_main:
        state.previews = SamplePreviews(run, prompt_conds)
    params = _prepare_denoiser(run, state, emit, plan, decided_by, trials, attention, early)
    # a hub base fetched by the loaders since the preflight: its content, not its id, is recorded
    # (and, for a resume, compared: ConfigError naming the base); identity_base.settle_base
    if state.identity.get("base_on_disk") is False:
        saved = read_checkpoint_info(state.resume)["identity"] if state.resume is not None else None
        state.identity = settle_base(state.identity, cfg, family.spec.denoiser, saved)
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
    early: EarlyDenoiser | None = None,
) -> list[torch.nn.Parameter]:
    """Build the denoiser for `plan` (training/planning/plan_build.py; from `early`'s load where the
    load ran beside phases 1-2), keep it in `state` and emit PlanChosen (with the fallbacks
    known now). Returns the trainable LoRA parameters."""
    cfg = run.cfg
    compile_blocks = wants_compile(cfg.compile, run.device)
    if early is not None:  # ModelLoadStarted was emitted when it started
        loaded, report = early.finish(run.device)
        t0 = time.perf_counter()
        built = build_denoiser(run, plan, compile_blocks=compile_blocks, loaded=loaded)
        rest = time.perf_counter() - t0  # the build after the load (LoRA, compile's wrapping), as before
        emit(
            ModelLoadCompleted(
                component="denoiser", seconds=report.seconds + rest, waited_s=report.waited + rest
            )
        )
    else:
        emit(ModelLoadStarted(component="denoiser"))
        t0 = time.perf_counter()
        built = build_denoiser(run, plan, compile_blocks=compile_blocks)
        emit(ModelLoadCompleted(component="denoiser", seconds=time.perf_counter() - t0))
    emit(Preparing(phase="denoiser", done=0, total=1))
    if built.init_warning is not None:  # init_lora's layers that start fresh (rank 0's emit only)
        logging.getLogger(__name__).warning("%s", built.init_warning)
        emit(RunWarning(step=state.steps_run, message=built.init_warning))
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
            fallbacks=[
                *filter(None, [run.card_note]),  # the card's memory taken as the budget
                *state.notes,
                *built.fallbacks,
                *filter(None, [attention.fallback_reason]),
            ],
            attention_backend=attention.backend,
            fused_projections=built.fused_groups,
        )
    )
    emit(Preparing(phase="denoiser", done=1, total=1))
    return built.params
