"""Checking a resume request before the GPU is touched (no torch, no HTTP).

A resume continues a run in its own output folder from one of its checkpoints (the newest by
default): the config is the checkpoint's, with only settings that do not change the maths
overridable; the base model, the dataset and the identity are checked like a new run's, so a
changed dataset or base model is refused with every differing field named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio import families
from lorastudio.basemodels import resolve_base
from lorastudio.config import TrainConfig, parse_train_config, resolve_train_config
from lorastudio.data.entries import resolve_entries
from lorastudio.data.latent_keys import run_cache_bytes
from lorastudio.data.pairs import resolve_control_dirs
from lorastudio.data.pixel_rule import read_otherwise
from lorastudio.data.row_names import spelt_resume_note
from lorastudio.data.run_scan import scan_for_run
from lorastudio.errors import ConfigError, FieldProblem, JobActive, ModelSourceError, NotFound
from lorastudio.families.single_file import model_source
from lorastudio.jobs.host_rules import host_problems, raw_host_problems
from lorastudio.jobs.validation import sample_prompt_problems, with_resolved_base
from lorastudio.settings import Settings
from lorastudio.training.checkpoint import (
    CHECKPOINTS,
    checkpoint_step,
    find_checkpoint,
    list_checkpoints,
    read_checkpoint_info,
    resume_settings,
)
from lorastudio.training.extend import extension_steps, finished_problem
from lorastudio.training.guidance_rules import resume_guidance_warnings
from lorastudio.training.identity import check_identity, config_as_recorded, dataset_files, run_identity
from lorastudio.training.identity_base import RELOCATABLE, record_for
from lorastudio.training.identity_dataset import dataset_record_for, rule1_fingerprint
from lorastudio.training.losses_file import losses_file_problem
from lorastudio.training.relocation import moved_problems, with_entry_paths


@dataclass(frozen=True)
class ValidatedResume:
    """A resume request that passed every cheap check."""

    config: TrainConfig  # resolved (what the API shows and stores)
    worker_config: TrainConfig  # what the worker gets (re-resolved there)
    checkpoint: Path  # the checkpoint folder to continue from
    step: int  # the checkpoint's step
    total_steps: int
    # what the resume answer says (sample prompts' guidance no preview applies: RELIABILITY 1872)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResumePoints:
    """What a run folder offers (read from its newest checkpoint): `resume_step`, the step a
    plain resume continues from (None: finished, or nothing left); `extend_from`, the step a
    "train longer" (a resume setting `steps` above `total_steps`: training/extend.py) continues
    from (None: no checkpoint, or the run counts epochs); `total_steps`, the newest checkpoint's
    total."""

    resume_step: int | None = None
    extend_from: int | None = None
    total_steps: int | None = None


def resume_points(run_dir: Path) -> ResumePoints:
    """The ResumePoints of `run_dir` (one read of its newest checkpoint and its sidecar)."""
    found = list_checkpoints(run_dir)
    if not found:
        return ResumePoints()
    try:
        info = read_checkpoint_info(found[-1])
    except ConfigError:
        return ResumePoints()
    step, total = int(info["step"]), int(info["total_steps"])
    config = info["config"] if isinstance(info["config"], Mapping) else {}
    epochs = int(config.get("num_epochs") or 0)
    finished = finished_problem(run_dir, extended=False) is not None
    return ResumePoints(
        resume_step=step if step < total and not finished else None,
        extend_from=None if epochs > 0 else step,
        total_steps=total,
    )


def validate_resume(
    run_dir: Path,
    checkpoint: str | None,
    overrides: Mapping[str, Any],
    settings: Settings,
    *,
    live_output_names: set[str],
) -> ValidatedResume:
    """Check a request to resume the run whose output folder is `run_dir`.

    Takes the run folder, a checkpoint folder name ("step-000123"; None = the newest), the
    settings to change (only those that do not change the maths, or `steps` above the run's
    total to train it longer: training/extend.py), the settings, and the output
    names of live jobs. Returns a ValidatedResume. Raises JobActive (the folder is in use),
    NotFound (no such checkpoint), ConfigError listing every problem (refused overrides, a
    checkpoint with no step left, base model / dataset problems, settings this host cannot run,
    each identity field that differs).
    """
    if run_dir.name in live_output_names:
        raise JobActive(f"{run_dir.name!r} is the output of a queued or running job")
    if checkpoint is None:
        found = find_checkpoint(run_dir)
    else:
        if checkpoint_step(Path(checkpoint)) is None or Path(checkpoint).name != checkpoint:
            raise ConfigError(
                [FieldProblem("checkpoint", f"{checkpoint!r} is not a checkpoint name (step-N)")]
            )
        found = find_checkpoint(run_dir / CHECKPOINTS / checkpoint)
    info = read_checkpoint_info(found)
    overrides = with_entry_paths(info["config"], overrides)  # datasets.N.path: a moved entry named anew
    new_total = extension_steps(info, overrides)  # training it longer (training/extend.py)
    step, total = int(info["step"]), new_total or int(info["total_steps"])
    finished = finished_problem(run_dir, new_total is not None)
    if finished is not None:
        raise ConfigError([finished])
    if (why := losses_file_problem(run_dir)) is not None:  # its first checkpoint would fail on it
        raise ConfigError([FieldProblem("resume", why)])
    if step >= total:
        raise ConfigError(
            [FieldProblem("checkpoint", f"{found.name} is at step {step} of {total}: nothing left")]
        )
    try:
        given = parse_train_config(resume_settings(info, overrides))
        cfg = resolve_train_config(given)
    except ConfigError as err:  # what this host cannot run comes in the same answer
        raw = {**dict(info["config"]), **dict(overrides)}
        reported = {p.field for p in err.problems}
        raise ConfigError(err.problems + raw_host_problems(raw, reported, settings)) from None
    if cfg.output_name != run_dir.name:
        raise NotFound(f"{found} belongs to run {cfg.output_name!r}, not to the folder {run_dir.name!r}")
    family = families.get(cfg.family)
    moved = moved_problems(cfg.model_dump())  # recorded where they are no more (a moved home)
    if moved:
        raise ConfigError(moved)
    if RELOCATABLE & set(overrides):  # the base named anew: stored as a run stores it
        cfg = with_resolved_base(cfg, settings)
    problems: list[FieldProblem] = []
    configs = None  # where the base's flavour is read (its control images)
    try:
        configs = resolve_base(
            cfg.base_model, family.spec.name, settings, cfg.revision, cfg.base_config
        ).configs
    except ModelSourceError as err:
        problems.append(FieldProblem("base_model", str(err)))
    entries = resolve_entries(cfg, settings.datasets_dir, allow_outside_root=False)
    control_dirs = resolve_control_dirs(cfg.control_dirs, settings.datasets_dir, allow_outside_root=False)
    flavour_controls = family.source_control_images(configs)
    scan = scan_for_run(  # with its masks: the fingerprint; its captions as the checkpoint trained them
        entries, cfg, family.spec, settings, control_dirs, flavour_controls, resume=True
    )
    problems += host_problems(cfg, settings)  # e.g. num_gpus set for the resume, a budget on a CPU host
    problems += sample_prompt_problems(cfg, scan, family, flavour_controls, settings)  # new ones too
    if problems:
        raise ConfigError(problems)
    before = cfg.model_copy(update={"steps": int(info["total_steps"])}) if new_total else cfg
    # under the checkpoint's rule, with the revision it recorded beside a local folder
    base = record_for(info["identity"], config_as_recorded(cfg, info), family.spec.denoiser)
    try:
        check_identity(
            info["identity"],
            run_identity(  # with the latent handling the run will have (training/identity_latents.py)
                before,
                dataset_record_for(  # under the checkpoint's dataset rule (training/identity_dataset.py)
                    info["identity"],
                    scan,
                    lambda: rule1_fingerprint(cfg, info["config"], family.spec, settings, flavour_controls),
                ),
                family.spec.lora_targets,
                base,
                dataset_files(scan),
                run_cache_bytes(before, scan, family.spec),
                read_otherwise(scan),  # the pixel rule, where the data needs it (identity_rules.py)
            ),
        )
    except ConfigError as err:  # rows an older version did not read: said how to go on (2200)
        note = spelt_resume_note(scan.dropped)
        if not note:
            raise
        raise ConfigError(
            [
                FieldProblem(p.field, p.message + note) if p.field == "dataset_fingerprint" else p
                for p in err.problems
            ]
        ) from None
    # recorded before the guidance rules (or set by this resume): goes on as recorded, said (1872)
    facts = family.local_facts(model_source(cfg), cfg.revision)  # on disk only: no download
    warnings = tuple(resume_guidance_warnings(cfg, family, facts))
    return ValidatedResume(
        config=cfg, worker_config=given, checkpoint=found, step=step, total_steps=total, warnings=warnings
    )
