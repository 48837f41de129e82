"""Phases 1-2 of a run (training/loop.py): the text conditioning and the latent source.

Phase 1 encodes each unique text once (the text encoders are freed after); with the disk latent
cache the captions' conditioning goes to disk too (training/inputs/conditioning_disk.py). Phase 2 loads
the VAE, encodes the held-out images and builds the latent source in the mode the cache size
and `latent_cache` call for (data/disk_cache.latent_mode): memory, disk or per-step.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import numpy as np

from lorastudio.data.caption_variants import item_dropouts, scan_variants
from lorastudio.data.control_sizing import rule_area
from lorastudio.data.disk_cache import cache_root, latent_mode
from lorastudio.data.latent_keys import run_cache_bytes
from lorastudio.data.preservation_texts import encode_list, preservation_texts
from lorastudio.families.single_file import model_source
from lorastudio.settings import Settings
from lorastudio.training.distributed import StopPoll
from lorastudio.training.events import DatasetWarnings, Emit, ModelLoadCompleted, ModelLoadStarted, RunWarning
from lorastudio.training.inputs.conditioning import (
    Conditioning,
    captions_to_encode,
    edit_prompts,
    encode_texts,
)
from lorastudio.training.inputs.conditioning_disk import DiskConditioning, encode_texts_on_disk, with_texts
from lorastudio.training.inputs.latents import (
    EncodedPerStep,
    LatentSource,
    build_latent_cache,
)
from lorastudio.training.inputs.latents_disk import open_disk_latents
from lorastudio.training.optimize import RunState
from lorastudio.training.planning.run_timings import conditioning_tokens
from lorastudio.training.precision import free_accelerator_memory
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.resume.identity_rules import validation_noise_seed
from lorastudio.training.samples import sample_reference_paths, sample_texts
from lorastudio.training.validate import ValidationRounds, encode_held_out

log = logging.getLogger(__name__)


def encode_conditioning(
    run: PreparedRun, state: RunState, emit: Emit, stop: StopPoll, settings: Settings
) -> tuple[Conditioning, Any, list[list[str]], list[float]]:
    """Phase 1: encode every text the run conditions on (captions and their variants, the sample
    prompts, the held-out captions, the preservation captions) and free the text encoders.
    Keeps the held-out and preservation conditioning in `state`. Returns (the captions'
    conditioning, the sample prompts', each item's caption variants, each item's caption dropout);
    with train_text_encoder nothing is encoded here (every step encodes through the TE LoRA)."""
    cfg, family, items = run.cfg, run.family, run.scan.items
    variants = scan_variants(run.scan, cfg.caption_variants, cfg.seed)  # per item (tag shuffle / dropout)
    dropouts = item_dropouts(run.scan, cfg.caption_dropout)  # each item's entry's
    captions = [it.caption for it in items]
    sees = family.spec.prompt_sees_controls  # encoded per caption + controls (Qwen-Image-Edit)
    # the captions themselves too: the memory plan's trials read them (training/planning/plan_measure.py)
    to_encode = (
        edit_prompts(items, dropouts, [[it.caption, *vs] for it, vs in zip(items, variants, strict=True)])
        if sees
        else captions_to_encode(captions + [v for vs in variants for v in vs], dropouts)
    )
    held = (  # the validation images' conditioning, keyed as training/validate.py looks it up
        edit_prompts(run.validation, 0.0)
        if sees
        else list(dict.fromkeys(it.caption for it in run.validation))
    )
    samples = sample_texts(cfg, family, sample_reference_paths(cfg, family, run.scan))  # with references
    state.preservation = preservation_texts(cfg, run.scan)  # the class-word captions (preservation.py)
    texts = [to_encode, samples, held, encode_list(state.preservation, run.scan, variants)]
    if cfg.train_text_encoder:  # encoded in every step (the picked variant), through the TE LoRA
        texts = [[], [], [], []]
    encode = encode_texts
    cut: list[str] = []  # the note naming the captions the text encoder cuts (measured as it loads)
    if run_latent_mode(run) == "disk" and not sees and not cfg.train_text_encoder:  # captions on disk too
        encode = functools.partial(  # conditioning_disk.py
            encode_texts_on_disk,
            root=cache_root(settings),
            holds=state.cache_entries,
            signatures=settings.text_signature_dir,
        )
    conds, prompt_conds, state.held_out_conds, kept = encode(
        family,
        cfg,
        texts,
        dtype=run.dtype,
        device=run.device,
        emit=emit,
        check_stop=stop,
        notes=state.notes,
        said=cut,
        one_by_one=(1,),  # the sample prompts, each alone as Generate encodes it (RELIABILITY 697)
    )  # each group in chunks of its own: the captions' tensors are those of a run without the others
    if cut and state.ctx.is_main:  # captions the text encoder cuts: a dataset warning (RELIABILITY 863)
        for line in cut:
            log.warning("%s", line)  # the run's log, the CLI's stderr (its `warning:` lines)
        emit(DatasetWarnings(warnings=[*run.dataset_warnings, *cut]))  # the record's whole list
    if isinstance(conds, DiskConditioning) and (note := conds.unwritten_note()) is not None:
        log.warning("%s", note)  # disk full or read-only: said, not silent (RELIABILITY 1742)
        emit(RunWarning(step=state.steps_run, message=note))
    conds = with_texts(conds, kept)  # the class-word captions beside the captions (RAM)
    if not sees and not cfg.train_text_encoder:  # the wall-time record's text tokens (run_timings.py)
        state.text_tokens = conditioning_tokens(family.spec, conds, [v for vs in variants for v in vs])
    return conds, prompt_conds, variants, dropouts


def run_latent_mode(run: PreparedRun) -> str:
    """memory | disk | per_step (data/disk_cache.latent_mode) for the run's cache size (the
    sizing its identity records too: training/resume/identity.latent_handling)."""
    need = run_cache_bytes(run.cfg, run.scan, run.family.spec)
    return latent_mode(run.cfg.latent_cache, need, run.cfg.latent_cache_max_gb)


def prepare_latents(
    run: PreparedRun,
    state: RunState,
    rng: np.random.Generator,
    emit: Emit,
    stop: StopPoll,
    settings: Settings,
) -> LatentSource:
    """Phase 2: load the VAE, encode the held-out images (validation) and build the run's latent
    source: the RAM cache, the disk cache, or per-step encoding (which keeps the VAE); the VAE is
    freed otherwise. Draws its crops / flips from `rng`; a stop request ends it (TrainingStopped)."""
    cfg, family, items = run.cfg, run.family, run.scan.items
    emit(ModelLoadStarted(component="vae"))
    t0 = time.perf_counter()
    vae = family.load_vae(model_source(cfg), cfg.revision, run.dtype, run.device)
    emit(ModelLoadCompleted(component="vae", seconds=time.perf_counter() - t0))
    if run.validation:  # the held-out images: encoded once, drawing from no run stream
        area = rule_area(cfg.control_resolution)  # the int control_resolution's, else None
        seed = validation_noise_seed(cfg, state.identity)  # validation_seed; an older checkpoint's: seed
        state.held_out = encode_held_out(
            family, vae, run.validation, seed, run.device, area, labels=run.validation_labels
        )
        state.validation = ValidationRounds(cfg.validate_every, run.run_dir)
    mode = run_latent_mode(run)
    if mode == "per_step":
        return EncodedPerStep(family, vae, items, cfg, rng)  # keeps the VAE for the whole run
    try:
        if mode == "disk":
            disk = open_disk_latents(
                run, vae, rng, cache_root(settings), emit=emit, check_stop=stop, holds=state.cache_entries
            )
            state.latents_encoded = disk.encoded  # the wall-time record scales by it (run_timings.py)
            if (note := disk.unwritten_note()) is not None:  # disk full or read-only: said, not silent
                log.warning("%s", note)
                emit(RunWarning(step=state.steps_run, message=note))
            return disk
        return build_latent_cache(family, vae, items, cfg, rng, device=run.device, emit=emit, check_stop=stop)
    finally:
        del vae
        free_accelerator_memory(run.device)
