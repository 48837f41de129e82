"""Everything about a training request that can be checked cheaply, before the GPU is touched.

`validate_run` checks the config (schema + family), the base model (local pipeline folder of the
right family, or a hub id of the right shape), the dataset (found under the datasets root,
scanned: images, captions, bad files), the output name (free), the precision (available on
this host) and what else the request asks of the host (jobs/host_rules.py), and reports every
problem at once in one ConfigError. It only reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio import families
from lorastudio.basemodels import inspect_folder, resolve_base
from lorastudio.basemodels.single_file import base_updates
from lorastudio.config import TrainConfig, parse_train_config, resolve_train_config
from lorastudio.config_datasets import with_paths
from lorastudio.config_resolve import free_output_name
from lorastudio.data import DatasetScan, resolve_dataset_dir, safe_component
from lorastudio.data.entries import (
    EntryScanError,
    entry_field,
    resolve_entries,
    resolved_folders,
    scanned_problems,
)
from lorastudio.data.holdout import Holdout, split_validation
from lorastudio.data.masks import MASK_FIELDS
from lorastudio.data.mix import MixEntry
from lorastudio.data.pairs import resolve_control_dirs
from lorastudio.data.run_scan import control_resolution_problems, scan_for_run
from lorastudio.data.sample_refs import reference_size_problems, sample_references
from lorastudio.errors import (
    ConfigError,
    DatasetError,
    FieldProblem,
    ModelSourceError,
    PathOutsideRoot,
    UnknownFamily,
)
from lorastudio.families.single_file import model_source as source_of
from lorastudio.jobs.card_fit import card_problems
from lorastudio.jobs.gone_check import refuse_if_gone as refuse_if_gone  # re-exported: it lived here
from lorastudio.jobs.hardware import host_info
from lorastudio.jobs.host_rules import host_problems, raw_host_problems
from lorastudio.jobs.run_host import host_for_run
from lorastudio.jobs.target_check import check_lora_targets
from lorastudio.settings import Settings
from lorastudio.training.adapters.assistant_rules import assistant_problems
from lorastudio.training.adapters.init_lora_rules import init_lora_notes, init_lora_problems
from lorastudio.training.guidance_rules import guidance_problems, sample_guidance_problems

if TYPE_CHECKING:
    from lorastudio.families.base import Family


@dataclass(frozen=True)
class ValidatedRun:
    """A request that passed every cheap check. config is resolved (family defaults filled,
    data_dir / each datasets entry's path the absolute folder, base_model the absolute folder or the hub id);
    model_dir is the local pipeline folder (None for a hub id)."""

    config: TrainConfig
    worker_config: TrainConfig  # the config as given (explicit fields kept) + resolved paths/name
    scan: DatasetScan  # what trains: the validation hold-out (if any) left out
    model_dir: Path | None
    holdout: Holdout | None = None  # the validation hold-out (data/holdout.py)
    notes: tuple[str, ...] = ()  # checks not made now, each with why (the run's start makes them)
    default_name: str | None = None  # the defaulted output name before free_output_name (None: the user's)


def validate_run(
    raw: Mapping[str, Any],
    settings: Settings,
    *,
    live_output_names: set[str],
    allow_outside_root: bool = False,
    check_targets: bool = False,
    decode_budget_s: float | None = None,
    host_checks: bool = True,
    device: str | None = None,
    fresh: bool = True,
) -> ValidatedRun:
    """Check a training request completely. Takes the raw config mapping, the settings and the
    output names of live jobs; `allow_outside_root` only for the CLI (a dataset folder anywhere,
    as data/paths.resolve_dataset_dir allows trusted local callers). Returns a ValidatedRun. Raises ConfigError listing every problem
    (config fields, base model, dataset files, output name, precision; with `check_targets`,
    the API's, also lora_targets / rank_pattern / alpha_pattern against the denoiser's module
    names: jobs/target_check.py, a child process when one of them is set; a check left to the
    run's start is named in ValidatedRun.notes). `decode_budget_s`: the seconds the dataset scan
    spends fully decoding images (data/run_scan.scan_for_run; None: the checks' budget, 0: none,
    only what the headers say). `host_checks` False leaves out the precision and host rules (the
    engine's verdict, training/verdict.py: it checks its own device). The host rules judge the GPU
    the run trains on (jobs/run_host.host_for_run): `device` (the CLI's `--device cuda:1`; None:
    the visible GPUs' first, where the job service places it) and, with `num_gpus`, the weakest
    of its GPUs. `fresh` False: a resume's config (the engine's verdict), whose sample prompts'
    guidance is not refused (training/guidance_rules.sample_guidance_problems: it resumes as it was)
    nor its captions holding another trainer's markup (data/run_scan.scan_for_run's `resume`)."""
    problems: list[FieldProblem] = []
    notes: list[str] = []
    given: TrainConfig | None = None
    cfg: TrainConfig | None = None
    try:
        given = parse_train_config(raw)
        cfg = resolve_train_config(given)
    except ConfigError as err:
        problems += err.problems
    default_name = (
        cfg.output_name if given is not None and cfg is not None and given.output_name is None else None
    )
    if cfg is not None and default_name is not None:  # a wall-clock stamp: taken in the same second
        cfg = cfg.model_copy(
            update={"output_name": free_output_name(default_name, settings.outputs_dir, live_output_names)}
        )
    reported = {p.field for p in problems}
    family = _family_or_none(raw.get("family"))

    entries: list[MixEntry] | None = None
    if cfg is not None:
        try:
            entries = resolve_entries(cfg, settings.datasets_dir, allow_outside_root=allow_outside_root)
        except ConfigError as err:  # several entries: each problem names its entry's field
            problems += err.problems if cfg.datasets else _as_problems("data_dir", err)
        except (PathOutsideRoot, DatasetError) as err:
            problems += _as_problems(entry_field(cfg, 0), err)
    elif "data_dir" not in reported and isinstance(raw.get("data_dir"), str):  # reported with the rest
        try:
            resolve_dataset_dir(raw["data_dir"], settings.datasets_dir, allow_outside_root=allow_outside_root)
        except (ConfigError, PathOutsideRoot) as err:
            problems += _as_problems("data_dir", err)

    model_source: str | None = None
    model_dir: Path | None = None
    configs: str | Path | None = None  # where the base's flavour is read (its control images)
    base: dict[str, Any] = {}
    if (
        not {"base_model", "revision", "base_config"} & reported  # a bad revision never reaches the hub cache
        and isinstance(raw.get("base_model"), str)
        and family is not None
    ):
        revision = raw.get("revision") if isinstance(raw.get("revision"), str) else None
        given_config = raw.get("base_config") if isinstance(raw.get("base_config"), str) else None
        v_pred = raw.get("v_prediction") if isinstance(raw.get("v_prediction"), bool) else None
        try:
            found = resolve_base(raw["base_model"], family.spec.name, settings, revision, given_config)
            base, base_problems = base_updates(
                found.source, found.folder, found.file, found.config, given_config, v_pred, revision
            )
            problems += base_problems
            model_source, model_dir, configs = found.source, found.folder, found.configs
        except ModelSourceError as err:
            field = "base_config" if str(err).startswith("base_config ") else "base_model"
            problems.append(FieldProblem(field, str(err)))
        except ConfigError as err:  # a revision with a folder under models/ (resolve_base): with the rest
            problems += err.problems

    precision = raw.get("base_precision", "auto")
    ranks = raw.get("num_gpus", 1) if cfg is None else cfg.num_gpus
    host = host_for_run(host_info(), device, ranks if isinstance(ranks, int) else 1) if host_checks else None
    if host is not None and "base_precision" not in reported and precision not in host.precisions:
        problems.append(
            FieldProblem(
                "base_precision",
                f"{precision} is not available on this host ({host.name}); "
                f"use one of {', '.join(host.precisions)}",
            )
        )

    if host is not None and cfg is not None:
        problems += host_problems(cfg, settings, host)
    elif host is not None:  # the config's other problems do not hide what this host cannot run
        problems += raw_host_problems(raw, reported, settings, host)

    scan: DatasetScan | None = None
    holdout: Holdout | None = None
    # (min, max) control images of the base checkpoint's flavour (a hub id: the family's)
    flavour_controls = family.source_control_images(configs) if family is not None else (0, 0)
    if cfg is not None and entries is not None and family is not None:
        try:
            control_dirs = resolve_control_dirs(cfg.control_dirs, settings.datasets_dir, False)
            scan = scan_for_run(  # a resume's: its captions as the checkpoint trained them (1750)
                entries, cfg, family.spec, settings, control_dirs, flavour_controls, decode_budget_s,
                resume=not fresh,
            )  # fmt: skip
        except EntryScanError as err:  # each entry's problems under its own datasets.N.path
            problems += [FieldProblem(err.field_of(i), p) for i, p in err.by_entry]
        except DatasetError as err:  # a control_dirs folder's own problem names that field (the form's)
            problems += [
                FieldProblem("control_dirs", p.message.removeprefix(CONTROL_DIRS))
                if p.message.startswith(CONTROL_DIRS)
                else p
                for p in _as_problems("data_dir" if cfg.datasets is None else "datasets", err)
            ]
        except ConfigError as err:  # control_dirs, or a mask setting (data/masks.py) that names itself
            problems += [
                p if p.field in MASK_FIELDS else FieldProblem("control_dirs", p.message) for p in err.problems
            ]
        except PathOutsideRoot as err:
            problems += _as_problems("control_dirs", err)
        if scan is not None:  # the validation hold-out (data/holdout.py)
            run_cfg, spec = cfg, family.spec
            try:
                holdout = split_validation(
                    scan,
                    cfg.validation_split,
                    cfg.seed,
                    resolve_folder=lambda given: resolve_dataset_dir(
                        given, settings.datasets_dir, allow_outside_root, field="validation_split"
                    ),
                    scan_folder=lambda folder: scan_for_run(
                        folder,
                        run_cfg,
                        spec,
                        settings,
                        (),
                        flavour_controls,
                        decode_budget_s,
                        resume=not fresh,
                    ),
                )
            except (ConfigError, PathOutsideRoot, DatasetError) as err:
                problems += _as_problems("validation_split", err)
    if scan is not None and cfg is not None:
        problems += control_resolution_problems(scan, cfg.control_resolution)
        # a weight whose share of the epoch rounds to 0; an epoch run's periodic settings against
        # its length, now known (the engine's preflight asks the same)
        problems += scanned_problems(cfg, scan, holdout.train if holdout is not None else scan)
    if scan is not None and cfg is not None and family is not None:  # against the images it trains on
        train_scan = holdout.train if holdout is not None else scan
        problems += sample_prompt_problems(cfg, train_scan, family, flavour_controls, settings)
    if cfg is not None:
        problems += output_name_problems(cfg.output_name or "", settings, live_output_names)

    if cfg is not None and model_source is not None and family is not None:  # what the base is
        based = cfg.model_copy(update=base)
        problems += assistant_problems(based, family)  # a distilled base?
        if given is not None:  # the file a run starts from: its header (training/adapters/init_lora_rules.py)
            explicit = {k for k in given.model_fields_set if getattr(given, k) is not None}
            problems += init_lora_problems(cfg, settings, explicit)
            notes += init_lora_notes(cfg, settings)  # a DoRA file whose header names no dora_scale rule
        facts = family.local_facts(source_of(based), based.revision)  # on disk only: no download
        problems += guidance_problems(based, family, facts)  # a guidance embedding?
        if fresh:  # a sample prompt's guidance no preview applies (a resume's: as it was)
            problems += sample_guidance_problems(based, family, facts)
        problems += family.objective_problems(source_of(based), based.revision)  # e.g. EDM SDXL
        if check_targets:  # the engine's meta-device check, in a child process (torch-free here)
            targets = check_lora_targets(based)
            problems += targets.problems
            notes += [targets.not_checked] if targets.not_checked else []
    if host_checks and cfg is not None and scan is not None and model_source is not None:
        problems += card_problems(cfg, model_dir, scan, host)  # even the lightest plan over the GPU
    if problems or given is None or cfg is None or scan is None or model_source is None or entries is None:
        raise ConfigError(problems or [FieldProblem("(config)", "invalid request")])
    folders = [str(p) for p in resolved_folders(cfg, settings.datasets_dir, allow_outside_root)]
    fixed = with_paths({**base, "output_name": cfg.output_name}, cfg, folders)
    # The worker re-resolves the config, so it gets the user's explicit fields as they were given.
    return ValidatedRun(
        config=TrainConfig.model_validate({**cfg.model_dump(), **fixed}),
        worker_config=given.model_copy(update=fixed),
        scan=holdout.train if holdout is not None else scan,
        model_dir=model_dir,
        holdout=holdout,
        notes=tuple(notes),
        default_name=default_name,
    )


def sample_prompt_problems(
    cfg: TrainConfig,
    scan: DatasetScan,
    family: Family,
    flavour_controls: tuple[int, int],
    settings: Settings,
) -> list[FieldProblem]:
    """The problems of `cfg.sample_prompts`' reference images (data/sample_refs.py) against the
    images `scan` trains on and the (min, max) controls of the base's flavour, and their smallest
    side at the samples' resolution; [] without sample prompts. A fresh run's and a resume's
    validation (jobs/resume.py) both ask, so neither starts a worker to fail on them."""
    if not cfg.sample_prompts:
        return []
    paths, refs = sample_references(
        cfg.sample_prompts,
        scan,
        flavour_controls,
        family=family.spec.name,
        max_pixels=settings.max_image_pixels,
        decode_pixels=settings.max_decode_pixels,
        sizing=family.spec.control_sizing,
        rule=cfg.control_resolution,
        control_names=cfg.control_dirs,
    )
    spec = family.spec  # each prompt's references at the size it renders at (its own, else the resolution)
    refs += reference_size_problems(
        cfg.sample_prompts, paths, cfg.resolution, spec.name, spec.min_reference_side
    )
    return [FieldProblem("sample_prompts", p) for p in refs]


def with_resolved_base(cfg: TrainConfig, settings: Settings) -> TrainConfig:
    """`cfg` with base_model in the one canonical form every run stores (what validate_run gives
    the job service's runs): a folder or single file as its absolute resolved path (a name under
    models/ too), a hub id as itself, or the folder lorastudio fetched it to; for a single file
    also base_config (and the v_prediction its header says). The run record, resume, "train
    again" and the disk caches then agree whoever started the run. Raises ConfigError
    (ModelSourceError's message on base_model / base_config, base_updates' problems)."""
    try:
        found = resolve_base(cfg.base_model, cfg.family, settings, cfg.revision, cfg.base_config)
    except ModelSourceError as err:
        field = "base_config" if str(err).startswith("base_config ") else "base_model"
        raise ConfigError([FieldProblem(field, str(err))]) from None
    base, problems = base_updates(
        found.source, found.folder, found.file, found.config, cfg.base_config, cfg.v_prediction, cfg.revision
    )
    if problems:
        raise ConfigError(problems)
    return cfg.model_copy(update=base)


def output_name_problems(name: str, settings: Settings, live_output_names: set[str]) -> list[FieldProblem]:
    """Why `name` cannot be a new run's output name (taken on disk or by a live job, unsafe). A
    mount point there that holds nothing is free: the run writes into it (RELIABILITY 1187)."""
    from lorastudio.training.resume.run_lock import empty_mount_point

    try:
        safe_component(name, field="output_name")
    except (ConfigError, PathOutsideRoot) as err:
        return _as_problems("output_name", err)
    if name in live_output_names:
        return [FieldProblem("output_name", f"{name!r} is the output of a queued or running job")]
    if os.path.lexists(settings.outputs_dir / name) and not empty_mount_point(settings.outputs_dir / name):
        return [
            FieldProblem("output_name", f"{name!r} already exists in {settings.outputs_dir}; pick another")
        ]
    return []


def _family_or_none(name: Any) -> Family | None:
    if not isinstance(name, str):
        return None
    try:
        return families.get(name)
    except UnknownFamily:
        return None


CONTROL_DIRS = "control_dirs: "  # how data/pairs.py begins a problem of a control_dirs folder


def _as_problems(field: str, err: Exception) -> list[FieldProblem]:
    if isinstance(err, ConfigError):
        return [FieldProblem(field, p.message) if p.field != field else p for p in err.problems]
    if isinstance(err, DatasetError) and err.problems:
        return [FieldProblem(field, p) for p in err.problems]
    return [FieldProblem(field, str(err))]


def local_models(models_dir: Path) -> list[dict[str, Any]]:
    """Pipeline folders directly under `models_dir` (those with a model_index.json), by name:
    {"name", "path", "family"}; family is the registered family that trains the pipeline's
    class (None when no family does or the index is unreadable). The full catalogue, with
    completeness and the other sources, is lorastudio.basemodels.list_models."""
    if not models_dir.is_dir():
        return []
    found = []
    for folder in sorted(models_dir.iterdir()):
        if folder.name.startswith(".") or not (folder / "model_index.json").is_file():
            continue
        found.append({"name": folder.name, "path": str(folder), "family": inspect_folder(folder).family})
    return found
