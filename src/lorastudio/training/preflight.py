"""Everything a run checks before it loads a model: the config (resolved against the family),
the output folder, the precision and the plan settings on this host (memory_budget_gb and
offload_blocks need CUDA), the dataset and the base model source. Nothing here writes a file.

Every problem at once (RELIABILITY 811): a refusal names what the engine's own checks found with
every other problem of the checks' one verdict (training/verdict.every_problem: the config's
rules, the base, the dataset, the rules that need the scan, the adapter targets), judged on a
scan that decodes no image in full; the config's own rules and this device's still refuse before
the run's scan decodes its dataset. Errors: ConfigError (every problem), DatasetError (a dataset
problem alone, e.g. pixels that do not decode), ModelSourceError.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.config import TrainConfig, family_problems, resolve_train_config
from lorastudio.config_host import optimizer_host_problems
from lorastudio.errors import ConfigError, DatasetError, FieldProblem, ModelSourceError, TrainingStopped
from lorastudio.tracker_login import report_to_problems
from lorastudio.training.adapters.assistant_rules import assistant_problems
from lorastudio.training.adapters.lora import planned_target_problems
from lorastudio.training.events import Emit, Preparing, StopCheck
from lorastudio.training.guidance_rules import (
    guidance_problems,
    resumed_guidance_warning,
    sample_guidance_problems,
)
from lorastudio.training.planning.plan import plan_host_problems
from lorastudio.training.precision import pick_device, pick_dtype, precision_problems
from lorastudio.training.speed.attention import attention_problems
from lorastudio.training.speed.compile import compile_problems

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from lorastudio.data import DatasetScan, ImageItem
    from lorastudio.data.decode_progress import DecodeProgress
    from lorastudio.families.base import Family
    from lorastudio.families.single_file import SingleFile
    from lorastudio.settings import Settings
    from lorastudio.training.adapters.init_lora import InitSource


@dataclass(frozen=True)
class PreparedRun:
    """A run that passed every check: resolved config, family, scanned dataset, where it writes."""

    cfg: TrainConfig  # resolved: every family default filled, base_model where it loads from
    family: Family
    scan: DatasetScan
    run_dir: Path  # outputs/<output_name> (does not exist yet)
    device: torch.device
    dtype: torch.dtype
    validation: tuple[ImageItem, ...] = ()  # held out of training (data/holdout.py): the validation images
    validation_labels: tuple[
        str, ...
    ] = ()  # Holdout.labels: the entries that name them (data.items.item_name)
    dataset_warnings: tuple[str, ...] = ()  # data/scan_warnings.py: logged, and emitted (DatasetWarnings)
    card_note: str | None = (
        None  # training/planning/card_plan.py: the plan against the card (its memory as a budget)
    )
    # training/adapters/init_lora.py: the LoRA file a fresh run starts from (None: a fresh adapter, or a resume)
    init_lora: InitSource | None = None
    # what the sidecar and the LoRA header name of it, {"file", "sha256"}: a resume's from its checkpoint
    init_record: dict[str, str] | None = None


def resolve_model_source(
    base_model: str, revision: str | None, family: Family, settings: Settings | None = None
) -> str:
    """Where the run loads its base model from, checked before anything is loaded: the same
    resolution as the job service's (basemodels.resolve_base_model: an absolute folder, a name
    under models/ or a hub id, each vetted). Returns the source (a folder path or a hub id).
    Raises ModelSourceError, or ConfigError for a revision given with a local folder (the
    resolver's rule, config_fields_source.local_revision_problem)."""
    from lorastudio.basemodels import resolve_base_model
    from lorastudio.settings import get_settings

    source, _ = resolve_base_model(base_model, family.spec.name, settings or get_settings(), revision)
    return source


def preflight(
    cfg: TrainConfig,
    settings: Settings,
    device: str | None,
    decode_budget_s: float = math.inf,
    progress: DecodeProgress | None = None,
    *,
    resume: bool = False,
) -> PreparedRun:
    """Validate a run without loading or writing anything (`_preflight`); a refusal lists every
    problem at once (training/verdict.every_problem): what the engine's checks found and the rest
    of the checks' verdict. A DatasetError (a folder missing, pixels that do not decode) stays
    one where the verdict finds no other problem; beside others it is one of them (ConfigError).
    `resume`: the run continues a checkpoint, whose state holds the adapter: init_lora is neither
    checked nor read (its file may be gone). Raises what `_preflight` raises."""
    from lorastudio.training.verdict import dedupe, every_problem

    try:
        return _preflight(cfg, settings, device, decode_budget_s, progress, resume)
    except ConfigError as err:
        raise ConfigError(every_problem(cfg, settings, err.problems, resume=resume)) from None
    except DatasetError as err:
        said = {*err.problems, str(err)}  # the verdict's words for this problem (e.g. a sample reference's)
        others = [
            p
            for p in every_problem(cfg, settings, [], resume=resume)
            if _top(p.field) not in DATASET_FIELDS and p.message not in said
        ]
        if not others:
            raise
        # the dataset's problem as the engine found it (its pixels, as no header says), then the rest;
        # several entries' each under its own entry's field (RELIABILITY 1774)
        from lorastudio.data.entries import EntryScanError

        found = (
            [FieldProblem(err.field_of(i), p) for i, p in err.by_entry]
            if isinstance(err, EntryScanError)
            else [FieldProblem("datasets" if cfg.datasets else "data_dir", str(err))]
        )
        raise ConfigError(dedupe([*found, *others])) from None


# the fields a dataset's own problems are named on (jobs/validation words a DatasetError so)
DATASET_FIELDS = frozenset({"data_dir", "datasets", "control_dirs", "validation_split"})


def _top(field: str) -> str:
    return field.split(".")[0]


def _preflight(
    cfg: TrainConfig,
    settings: Settings,
    device: str | None,
    decode_budget_s: float = math.inf,
    progress: DecodeProgress | None = None,
    resume: bool = False,
) -> PreparedRun:
    """Validate a run without loading or writing anything.

    The dataset scan (and a validation folder's) decodes every pixel of each image its folder's
    decoded record (data/decoded.py) does not list as it is now, with no time budget by default
    (`decode_budget_s`): the checks before a run (the job service's, `train --check`) spend at
    most decoded.FULL_DECODE_BUDGET_S, and what they left is decoded here, before any model
    loads, so a file whose pixels do not decode fails the run naming it, and none trains on the
    header check alone. What passes is recorded, so the next check decodes none of it.
    `progress` (the run's: `scan_progress`) counts those decodes, reports them and asks for a
    stop before each.

    Returns the PreparedRun. Raises ConfigError (config, output folder and precision
    problems, all at once), UnknownFamily via ConfigError, DatasetError, PathOutsideRoot,
    ModelSourceError; TrainingStopped when `progress`'s stop check sees a stop.
    """
    from lorastudio import families
    from lorastudio.data import resolve_dataset_dir
    from lorastudio.data.entries import resolve_entries
    from lorastudio.data.holdout import split_validation
    from lorastudio.data.pairs import resolve_control_dirs
    from lorastudio.data.run_scan import control_resolution_problems, scan_for_run
    from lorastudio.data.safe_open import check_not_relinked
    from lorastudio.training.resume.run_lock import empty_mount_point

    problems = family_problems(cfg)  # every config problem, before any default is filled
    dev = pick_device(device)
    problems += precision_problems(cfg.base_precision, dev)
    problems += compile_problems(cfg.compile, dev)
    problems += attention_problems(cfg.attention_backend, dev)
    problems += plan_host_problems(cfg, dev.type)
    problems += optimizer_host_problems(cfg.optimizer, dev.type)  # 8-bit: CUDA + bitsandbytes
    problems += report_to_problems(cfg.report_to, settings)  # each tracker's package; W&B's key
    if cfg.output_name is not None:
        taken = settings.outputs_dir / cfg.output_name
        if (taken.exists() or taken.is_symlink()) and not empty_mount_point(taken):  # RELIABILITY 1187
            problems.append(
                FieldProblem("output_name", f"{taken} already exists; choose another output_name")
            )
    if problems:
        raise ConfigError(problems)
    resolved = resolve_train_config(cfg)
    family = families.get(resolved.family)
    run_dir = settings.outputs_dir / str(resolved.output_name)
    # A folder the server validated and then swapped for a link is refused, not followed.
    entries = resolve_entries(resolved, settings.datasets_dir, allow_outside_root=True, check_links=True)
    control_dirs = resolve_control_dirs(resolved.control_dirs, settings.datasets_dir, allow_outside_root=True)
    for given, control_dir in zip(resolved.control_dirs, control_dirs, strict=True):
        check_not_relinked(given, control_dir, settings.datasets_dir)

    scan = scan_for_run(
        entries,
        resolved,
        family.spec,
        settings,
        control_dirs,
        decode_budget_s=decode_budget_s,
        progress=progress,
        resume=resume,  # captions the checkpoint trained as they were (RELIABILITY 1750)
    )
    sizing = control_resolution_problems(scan, resolved.control_resolution)
    if sizing:
        raise ConfigError(sizing)
    holdout = split_validation(
        scan,
        resolved.validation_split,
        resolved.seed,
        resolve_folder=lambda given: resolve_dataset_dir(
            given, settings.datasets_dir, allow_outside_root=True, field="validation_split"
        ),
        scan_folder=lambda folder: scan_for_run(
            folder,
            resolved,
            family.spec,
            settings,
            decode_budget_s=decode_budget_s,
            progress=progress,
            resume=resume,
        ),
    )
    if progress is not None:
        progress.finish()  # the final count of the decode scan
    from lorastudio.data.entries import scanned_problems

    scanned = scanned_problems(resolved, scan, holdout.train)  # the job service's rules too: raised below
    scan = holdout.train
    from lorastudio.data.scan_warnings import scan_warnings

    warnings = tuple(scan_warnings(scan, resolved, holdout))  # the job service's preflight lists them too
    for warning in warnings:
        log.warning("%s", warning)
    from lorastudio.basemodels import resolve_base
    from lorastudio.basemodels.single_file import base_updates
    from lorastudio.families.single_file import model_source

    found = resolve_base(
        resolved.base_model, family.spec.name, settings, resolved.revision, resolved.base_config
    )
    updates, problems = base_updates(
        found.source, found.folder, found.file, found.config,
        resolved.base_config, resolved.v_prediction, resolved.revision,
    )  # fmt: skip
    if problems:
        raise ConfigError(problems)
    if found.file is not None:
        log.info("base model: single file %s with the config of %s", found.source, found.config)
    resolved = resolved.model_copy(update=updates)  # what the loaders read
    # e.g. Qwen-Image-Edit: 1 control, Plus: 0-3 (a single file: its base config's flavour)
    flavour = family.source_variant(model_source(resolved), resolved.revision)
    if flavour is not None and flavour.control_images is not None:
        from lorastudio.data.control_counts import missing_controls, too_many_controls

        checked = [*scan.items, *holdout.validation]
        excess = too_many_controls(checked, flavour.control_images, flavour.title)
        if excess:
            raise DatasetError(f"{scan.root}: more control images than {flavour.title} takes", excess)
        missing = missing_controls(checked, flavour.control_images, flavour.title)
        if missing:  # e.g. a hub id whose flavour (the single-image edit model) needs one per image
            raise DatasetError(f"{scan.root}: {flavour.title} needs a control image per image", missing)
    if resolved.sample_prompts:  # their references before any load (a CLI resume's new ones too)
        from lorastudio.data.sample_refs import reference_size_problems
        from lorastudio.training.samples import sample_reference_paths

        paths = sample_reference_paths(resolved, family, scan)  # raises DatasetError naming each
        spec = family.spec
        small = reference_size_problems(
            resolved.sample_prompts, paths, resolved.resolution, spec.name, spec.min_reference_side
        )  # the job service's rule (jobs/validation.sample_prompt_problems): not a failed round mid-run
        scanned += [FieldProblem("sample_prompts", p) for p in small]
    problems = scanned + assistant_problems(resolved, family)  # needs the source: is the base distilled?
    facts = _facts(family, model_source(resolved), resolved.revision)
    problems += guidance_problems(resolved, family, facts)
    unapplied = sample_guidance_problems(resolved, family, facts)  # guidance no preview applies
    if not resume:
        problems += unapplied
    elif family.spec.guidance != "true_cfg":  # recorded before the rule: resumes as it did, told
        told = tuple(resumed_guidance_warning(p) for p in unapplied)  # (1751; Qwen's: scan_warnings)
        for warning in told:
            log.warning("%s", warning)
        warnings += told
    problems += planned_target_problems(resolved, family)  # lora_targets / patterns: the meta denoiser's
    problems += family.objective_problems(model_source(resolved), resolved.revision)  # e.g. an EDM SDXL
    init = None  # the file a fresh run starts from (training/adapters/init_lora.py), its ranks in `resolved`
    if resolved.init_lora is not None and not resume:
        from lorastudio.training.adapters.init_lora import preflight_init

        resolved, init, found = preflight_init(cfg, resolved, settings, family.spec.lora_targets)
        problems += found
    if problems:
        raise ConfigError(problems)
    dtype = pick_dtype(resolved.base_precision, dev)
    card_note = None
    if (
        dev.type == "cuda"
    ):  # a default plan over the card: its memory as the budget (training/planning/card_plan.py)
        from lorastudio.jobs.preflight import control_load
        from lorastudio.training.planning.card_plan import card_planned

        resolved, card_note = card_planned(resolved, found.folder, control_load(scan, resolved), dev)
    return PreparedRun(
        resolved, family, scan, run_dir, dev, dtype, holdout.validation, holdout.labels, warnings, card_note,
        init, init.record() if init is not None else None,
    )  # fmt: skip


def scan_progress(emit: Emit, should_stop: StopCheck | None) -> DecodeProgress:
    """The run's decode scan's progress (data/decode_progress.py): its counts as
    Preparing("decoding", done, total) events through `emit`, and before each full decode a look
    at `should_stop`, which raises TrainingStopped: the run ends stopped before any model loads
    or its folder is claimed (training/loop.py). The look is this process's own (no collective):
    in a data-parallel run only rank 0 scans with it, the other ranks wait for its outcome and
    end stopped with it (training/rank_scan.py)."""
    from lorastudio.data.decode_progress import DecodeProgress

    def check_stop() -> None:
        request = should_stop() if should_stop is not None else None
        if request is not None:
            raise TrainingStopped(request.save)

    def report(done: int, total: int) -> None:
        emit(Preparing(phase="decoding", done=done, total=total))

    return DecodeProgress(report, check_stop)


def _facts(family: Family, source: str | SingleFile, revision: str | None) -> dict[str, Any] | None:
    """The base checkpoint's facts: from disk (Family.local_facts), else through diffusers'
    load_config (a hub id not cached yet); None when neither can read them."""
    facts = family.local_facts(source, revision)
    if facts is not None:
        return facts
    try:
        return family.checkpoint_facts(source, revision)
    except ModelSourceError:
        return None
