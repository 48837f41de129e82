"""`train()`: one family-agnostic training run, in phases that keep peak memory low.

  preflight  config, engine settings, output folder, precision, dataset, model source (no I/O)
  attention  auto's kernel probe starts here, in a child process, and works beside phases 1-2
             (training/speed/attention_early.py; a result cached for this GPU and shapes skips it)
  phase 1    text encoders only: encode each unique caption once, free the encoders
             (phases 1-2: training/loop_inputs.py)
  phase 2    VAE only: latent cache (posterior mean/std per crop/flip variant), free the VAE
             (or keep it and encode every step when the cache would exceed its RAM budget);
             latent_cache "disk" (or "auto" above the RAM budget) keeps it on disk across runs
             (training/inputs/latents_disk.py)
  plan       how the denoiser phase runs (training/planning/plan.py): the config's settings; with
             memory_budget_gb, the fastest measured plan that fits (after phase 2: trials use
             the run's conditioning and latents); a resume reuses its checkpoint's plan.
             PlanChosen is emitted once, before the first step
  phase 3    denoiser + LoRA (built for the plan: training/planning/plan_build.py): batched,
             gradient-accumulated optimizer steps (training/optimizers.py) in the plan's
             micro-batches, with an LR schedule
  validate   with validation_split: the held-out images encoded in phase 2, their loss measured at
             fixed noise every cfg.validate_every steps and after the last one (training/validate.py)
  samples    with sample prompts (encoded in phase 1): previews rendered with the live LoRA every
             cfg.sample_every steps and after the last one (training/samples.py), SampleReady
  export     outputs/<output_name>/<output_name>.safetensors + .json (staged, fsynced, then
             renamed); with ema_decay that LoRA holds the EMA weights and
             <output_name>.raw.safetensors (+ .raw.json) the raw ones (training/ema.py). After
             the last step the order is: its validation round, the export, the final sample
             round, Complete; a kill while the final samples render keeps the LoRA, and a failure
             there completes the run with a RunWarning (training/loop_end.finish_run; a stop with
             save exports the steps run when it lands). Rank 0 holds a lock on the run folder for
             the session (training/resume/run_lock.py: a resume of a folder another live session
             writes is JobActive)

The phases after the session is prepared are in training/loop_phases.py.

Checkpoints (outputs/<output_name>/checkpoints/step-N, see training/resume/checkpoint.py) are written
every cfg.save_every steps and on stop-and-save; `train(..., resume=...)` continues a run from one
in the same folder: phases 1-2 rebuild the conditioning and latent cache deterministically from
the seed, then the loop's complete state (LoRA, optimizer, schedule, scaler, sampler position,
meters, every RNG stream) is restored, so the remaining steps are those of an uninterrupted run.

A stop request is honoured between phases, per image while caching and after every step.
Exactly one terminal event is emitted: Complete, or Error (then the exception is re-raised).
A fresh run that finished writes its wall-time record (training/planning/run_timings.py) just before its
Complete, its memory freed, so the run's end as the job service reports it finds the record.

Launched by torchrun / accelerate launch (RANK, WORLD_SIZE, LOCAL_RANK set), the run is
data-parallel (training/distributed.py): same maths as one process with the same global batch,
only rank 0 emits events and writes files, and stop requests are agreed on by every rank.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.data.cache_prune import prune_after_run
from lorastudio.data.decode_progress import DecodeProgress
from lorastudio.errors import LorastudioError, TrainingStopped
from lorastudio.lora.snapshots import SnapshotKeeper, keep_final_as_snapshot
from lorastudio.settings import Settings, get_settings
from lorastudio.timings import FINAL_LORA_SAVED, PhaseClock
from lorastudio.training.adapters.export import export_run
from lorastudio.training.distributed import (
    StopPoll,
    barrier,
    check_parallel_config,
    end_group,
    launched_context,
    process_device,
    start_group,
)
from lorastudio.training.ema_preview import finish_preview_ema
from lorastudio.training.events import (
    Complete,
    DatasetWarnings,
    Emit,
    Error,
    RunWarning,
    StopCheck,
)
from lorastudio.training.loop_phases import run_phases
from lorastudio.training.optimize import RunState
from lorastudio.training.planning.plan_measure import DeviceMeter
from lorastudio.training.planning.run_timings import record_run_timings
from lorastudio.training.precision import free_accelerator_memory, pick_device, run_numerics
from lorastudio.training.preflight import PreparedRun, scan_progress
from lorastudio.training.rank_scan import prepare_on_ranks
from lorastudio.training.resume.checkpoint import (
    CheckpointKeeper,
    checkpoint_step,
    find_checkpoint,
    read_checkpoint_info,
)
from lorastudio.training.resume.extend import extension_record
from lorastudio.training.resume.run_lock import claim_run_dir, holds, lock_run_dir, release_run_dir
from lorastudio.training.session import clean_after_failure, discard_session, prepare_session
from lorastudio.training.speed.attention_fa4 import keep_fa4_cache
from lorastudio.training.speed.compile import keep_compile_cache, wants_compile
from lorastudio.training.speed.device_warmup import warm_device
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
    run_id: str | None = None,
) -> TrainResult:
    """Run one training job described by `cfg`, reporting through `emit`.

    Takes: the config (as parsed; family defaults are resolved here), the event sink, an
    optional stop poll, the settings (default: this process's), a device ("cpu", "cuda", ...;
    default: CUDA when available), and `resume`: a checkpoint folder, or a run folder (its
    newest checkpoint), to continue from. A resume keeps the checkpoint's run folder and total
    steps; cfg must have the checkpoint's identity (training/resume/identity.py; see
    checkpoint.resume_settings to build it from the checkpoint).
    `meter` is a test hook: the DeviceMeter that measures the plans of a memory budget instead
    of the device's (a plan_measure.FakeDeviceMeter lets the chooser run on the CPU; with it,
    memory_budget_gb is accepted on a CPU host). Leave it None for real runs.
    `run_id`: the id of the run's record in the run store (the job's, a CLI run's), written in a
    fresh run's mark (training/resume/fresh_mark.py) so that the process removing what a kill left adds
    its note to this record; None: not recorded (the note is only logged).
    `started_at`: when the calling process started (timings.process_started_at(); the CLI and the
    job worker pass it): the run's wall-time record counts the process's start (imports) too.
    Returns: TrainResult. A stop with save after >= 1 step of this session writes a checkpoint
    and the LoRA of the steps run. A stop without save removes what this session wrote: the
    files a run writes in a fresh run's folder (a file someone else put there stays, named in a
    RunWarning), this session's checkpoints, snapshots and samples in a resumed one.
    Raises (after emitting Error): ConfigError (also: a resume whose identity differs, naming
    each differing field), NotFound (no checkpoint), DatasetError, PathOutsideRoot,
    ModelSourceError for user mistakes, TrainingDiverged, or whatever unexpected error
    occurred. Data-parallel: ConfigError when cfg.num_gpus is not the launched world size or
    batch_size does not divide by it; ranks other than 0 emit nothing and return lora_path None.
    On any failure this session's partial outputs are removed (never what it did not write: a
    RunWarning names what a fresh folder kept), except checkpoints:
    a run folder that holds one is kept, resumable; and except the run's LoRA, once written (an
    interrupt in the final sample round: the folder is kept with it; an exception there is no
    failure: a RunWarning, then Complete).
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
    trackers = TrackerSink([])  # the run's, once its context is known
    try:
        state.ctx = launched_context()
        main = state.ctx.is_main
        # report_to (training/trackers.py); the studio's W&B key from its settings (jobs/childenv.py)
        trackers = TrackerSink(
            cfg.report_to if main else [],
            settings.wandb_api_key,
            wandb_identity_file=settings.wandb_identity_token_file,
        )
        emit = clock.wrap(trackers.wrap(emit if main else _emit_nothing))
        check_parallel_config(cfg, state.ctx)
        state.resume = find_checkpoint(resume) if resume is not None else None
        rank_device = process_device(device, state.ctx)
        # the group first: rank 0's preflight alone tells the others its outcome (training/rank_scan.py)
        state.ctx = start_group(state.ctx, pick_device(rank_device))
        warm_device(pick_device(rank_device))  # CUDA's context starts beside the preflight (device_warmup)
        run, state.identity = prepare_on_ranks(
            state.ctx,
            lambda progress: _prepare_session(cfg, settings, rank_device, state.resume, meter, progress),
            lambda: scan_progress(emit, should_stop),
            should_stop,
        )
        if run.dataset_warnings:  # the run record keeps them (rank 0's emit only)
            emit(DatasetWarnings(warnings=list(run.dataset_warnings)))
        if state.resume is not None:
            _note_extension(run, state)
        if wants_compile(run.cfg.compile, run.device):
            keep_compile_cache(settings.compile_cache_dir)
        if state.resume is None:
            barrier(state.ctx)  # every rank's preflight saw the folder free before rank 0 claims it
            if main:
                state.run_lock = claim_run_dir(
                    run.run_dir, run_id
                )  # held to the end (training/resume/run_lock.py)
        elif main:
            state.run_lock = lock_run_dir(run.run_dir)  # JobActive while another session writes it
        claimed = main
        # a resume logs from the step after its checkpoint's (TensorBoard purges a later one's)
        first = (checkpoint_step(state.resume) or 0) if state.resume is not None else 0
        trackers.open(run.run_dir, run.cfg.model_dump(mode="json"), first_step=first + 1)
        state.keeper = CheckpointKeeper(run.run_dir, run.cfg.save_every, run.cfg.keep_last)
        state.loras = SnapshotKeeper(run.run_dir, run.cfg.save_lora_every, run.cfg.keep_loras)
        if main:
            state.final_save = functools.partial(_save_final, run, state, clock)
        save = True
        try:
            with run_numerics(run.cfg.enable_tf32, run.device):
                run_phases(run, state, emit, StopPoll(should_stop, state.ctx, run.device), meter, settings)
        except TrainingStopped as request:
            stopped, save = True, request.save
        if not main:
            pass  # rank 0 writes (or removes) every file of the run
        elif state.final_lora is not None:
            lora_path = state.final_lora  # written after the last step, before the final samples
        elif save and state.steps_run > state.steps_at_start:
            lora_path = export_run(run, state, stopped)
            state.keeper.finish()
            state.loras.finish()
            finish_preview_ema(run.run_dir)  # an earlier session's preview pair (RELIABILITY 1743)
        elif not save or state.resume is None:
            trackers.close()  # before their folders go (W&B's writer would make its own again)
            if _may_remove(run, state, emit):
                if state.previews is not None and state.resume is not None:
                    state.previews.discard()  # a fresh run's samples go with its folder
                state.loras.discard()
                if state.validation is not None and state.resume is not None:
                    state.validation.discard()  # the record as this session found it
                if state.resume is not None:
                    state.losses.discard()  # losses.bin as this session found it
                kept = discard_session(run.run_dir, state.resume is not None, state.keeper)
                _note_kept(emit, state, kept)
            claimed = False
    except BaseException as err:
        if isinstance(err, TrainingStopped) and run is None:
            stopped = True  # seen by the preflight's decode scan: nothing loaded, claimed or written
        else:  # a failure (a stop after the preflight is run_phases', handled above)
            if claimed and run is not None:
                trackers.close()
                if _may_remove(run, state, emit):
                    kept = clean_after_failure(
                        run.run_dir, state.resume is not None, state.final_lora is not None
                    )
                    _note_kept(emit, state, kept)
            emit(Error(message=_message(err, state.attention)))
            raise
    finally:
        if state.swap is not None and return_denoiser:
            state.swap.detach()  # the caller gets a plain model (every block on the device)
        denoiser = state.denoiser
        state.denoiser = state.ddp = state.swap = None
        for held in state.cache_entries:
            os.close(held)  # releases the cache entries it read (data/cache_io.hold_entry)
        used_cache, state.cache_entries = bool(state.cache_entries), []
        if state.cache_readers is not None:
            os.close(state.cache_readers)  # releases the cache's readers lock
            state.cache_readers = None
        end_group(state.ctx)
        release_run_dir(state.run_lock)
        state.run_lock = None
    if denoiser is not None:
        denoiser.eval()
    kept = denoiser if return_denoiser else None
    del denoiser
    if run is not None:
        free_accelerator_memory(run.device)
    if lora_path is not None and not stopped and state.resume is None and state.plan is not None:
        # before Complete: the job service reports the run's end on it, and the next preflight
        # forecasts from this record (its end is now, Complete the next moment: RELIABILITY 1860)
        record_run_timings(run, state, clock, settings)
    emit(
        Complete(lora_path=str(lora_path) if lora_path else None, steps_run=state.steps_run, stopped=stopped)
    )
    if used_cache and state.ctx.is_main:
        prune_after_run(settings)  # the disk cache over its cap: least recently used entries go
    resumed_from = state.steps_at_start if state.resume is not None else None
    encoders = state.text_encoders if return_denoiser else None
    return TrainResult(lora_path, state.steps_run, stopped, list(state.losses), kept, resumed_from, encoders)


def _save_final(run: PreparedRun, state: RunState, clock: PhaseClock) -> None:
    """The run's LoRA and sidecars after its last step (export_run), and the checkpoints and
    LoRA snapshots pruned as at a run's end. Called by the optimizer loop before the final sample round, so a kill or
    a failure while the samples render keeps the trained LoRA; the clock marks its end (the final
    sample round's time starts there: timings.phase_seconds)."""
    state.final_lora = export_run(run, state, stopped=False)
    if state.keeper is not None:
        state.keeper.finish()
    if state.loras is not None:
        state.loras.finish()
    finish_preview_ema(run.run_dir)  # an earlier session's preview pair (RELIABILITY 1743)
    clock.mark(FINAL_LORA_SAVED)


def _note_extension(run: PreparedRun, state: RunState) -> None:
    """A resume whose total exceeds its checkpoint's trains the run longer (training/resume/extend.py):
    remember it (the schedule is re-spanned after the checkpoint loads) and its record."""
    info = read_checkpoint_info(state.resume)
    longer = run.cfg.num_epochs == 0 and int(run.cfg.steps) > int(info["total_steps"])
    state.extended = longer
    state.extensions = extension_record(info, int(run.cfg.steps) if longer else None)
    if longer and state.ctx.is_main:
        keep_final_as_snapshot(run.run_dir)  # the LoRA of the old total stays, as a snapshot


def _prepare_session(
    cfg: TrainConfig,
    settings: Settings,
    device: str | None,
    resume: Path | None,
    meter: DeviceMeter | None,
    progress: DecodeProgress | None = None,
) -> tuple[PreparedRun, dict[str, Any]]:
    """session.prepare_session (`progress`: its decode scan's); with a test meter, a memory
    budget skips the host check (the meter stands in for the GPU) and is put back into the
    prepared config."""
    budget = cfg.memory_budget_gb
    if meter is None or budget is None:
        return prepare_session(cfg, settings, device, resume, progress)
    run, identity = prepare_session(
        cfg.model_copy(update={"memory_budget_gb": None}), settings, device, resume, progress
    )
    return dataclasses.replace(run, cfg=run.cfg.model_copy(update={"memory_budget_gb": budget})), identity


def _may_remove(run: PreparedRun, state: RunState, emit: Emit) -> bool:
    """Whether this session may remove what it wrote in run.run_dir: the folder there is still
    the one it claimed or locked (run_lock.holds). One renamed away, replaced by another folder
    (another run's) or by a link while the run was live is not its own: nothing is removed, and
    a RunWarning says so."""
    if holds(state.run_lock, run.run_dir):
        return True
    note = f"{run.run_dir} is no longer the folder this run wrote (moved or replaced while it ran): nothing removed"
    emit(RunWarning(step=state.steps_run, message=note))
    return False


def _note_kept(emit: Emit, state: RunState, note: str | None) -> None:
    """The run record's word on what a fresh folder kept (session.py), as a RunWarning."""
    if note is not None:
        emit(RunWarning(step=state.steps_run, message=note))


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
