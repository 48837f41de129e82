"""One session of a run (a fresh run, or one resume of it): what it checks before loading a
model, and what it leaves in the run folder when it does not end with a LoRA.

Rules: a fresh run claims a new folder; a resume continues in the folder of its checkpoint and
must have the checkpoint's identity. Stop-and-discard removes what this session wrote (in a
fresh run's folder, every file a run writes: training/resume/run_files.py; in a resumed one, this
session's checkpoints, snapshots and samples). A failed session keeps a folder that holds a
checkpoint (resumable) or its written LoRA, and in a fresh folder that holds neither removes
what a run writes. A fresh folder goes with rmdir only: a file or folder someone else put there
stays (with the folders holding it), and the log and the run record say so (`kept_note`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio.data.latent_keys import run_cache_bytes
from lorastudio.data.pixel_rule import read_otherwise
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.preflight import PreparedRun, preflight
from lorastudio.training.resume.checkpoint import (
    CheckpointKeeper,
    list_checkpoints,
    read_checkpoint_info,
    run_dir_of,
)
from lorastudio.training.resume.extend import finished_problem
from lorastudio.training.resume.identity import (
    INIT_KEY,
    check_identity,
    config_as_recorded,
    dataset_files,
    run_identity,
)
from lorastudio.training.resume.identity_base import base_record, record_for
from lorastudio.training.resume.identity_dataset import dataset_record, dataset_record_for, rule1_fingerprint
from lorastudio.training.resume.identity_rules import as_checkpoint
from lorastudio.training.resume.run_files import kept_note, remove_leftovers, remove_session_files

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data.decode_progress import DecodeProgress
    from lorastudio.settings import Settings

log = logging.getLogger(__name__)


def prepare_session(
    cfg: TrainConfig,
    settings: Settings,
    device: str | None,
    checkpoint: Path | None,
    progress: DecodeProgress | None = None,
) -> tuple[PreparedRun, dict[str, Any]]:
    """Preflight the run and compute its identity. For a resume (`checkpoint` set) the run folder
    is the checkpoint's and the identity must equal the checkpoint's.

    A resume whose cfg.steps exceeds the checkpoint's total trains the run longer: the identity
    is compared with the checkpoint's steps, and the returned one has the new total. A resume
    keeps the checkpoint's DoRA weight-decay rule (identity_rules.as_checkpoint: an older DoRA
    checkpoint continues under rule 1, its optimizer's one param group).
    Returns (prepared run, identity). Raises ConfigError: every preflight problem, an
    output_name other than the checkpoint's folder, a checkpoint with no step left, a finished
    run resumed without a larger total, or one problem per identity field that differs; plus
    what preflight raises (`progress`: its decode scan's, preflight's).
    """
    if checkpoint is None:
        run = preflight(cfg, settings, device, progress=progress)
        base = base_record(run.cfg, run.family.spec.denoiser)
        identity = _identity(run, run.cfg, base, read_otherwise(run.scan))
        if run.init_record is not None:  # the file it starts from: kept, never compared (identity.py)
            identity[INIT_KEY] = dict(run.init_record)
        return run, identity
    problems = resume_problems(cfg, checkpoint)
    if problems:
        raise ConfigError(problems)
    run_dir = run_dir_of(checkpoint)
    info = read_checkpoint_info(checkpoint)
    old_total = int(info["total_steps"])
    extended = cfg.num_epochs == 0 and cfg.steps > old_total  # training it longer (training/resume/extend.py)
    cfg = _checkpoint_ranks(cfg, info)
    # The folder exists (it is the one continued): everything else is checked as for a new run.
    run = preflight(
        cfg.model_copy(update={"output_name": None}), settings, device, progress=progress, resume=True
    )
    run = dataclasses.replace(
        run, cfg=run.cfg.model_copy(update={"output_name": run_dir.name}), run_dir=run_dir
    )
    base = base_record(run.cfg, run.family.spec.denoiser)
    pixels = read_otherwise(run.scan)  # each file's header read once
    identity = as_checkpoint(_identity(run, run.cfg, base, pixels), info["identity"])
    saved_init = info["identity"].get(INIT_KEY)
    if isinstance(saved_init, dict):  # the file the run started from, as its first session recorded it
        identity[INIT_KEY] = saved_init
        run = dataclasses.replace(run, init_record={str(k): str(v) for k, v in saved_init.items()})
    before = run.cfg.model_copy(update={"steps": old_total}) if extended else run.cfg
    # the base as the checkpoint's rule takes it (identity_base.py: a checkpoint of rule 1 resumes),
    # with the revision it recorded beside a local folder (training/resume/checkpoint.py)
    then = record_for(info["identity"], config_as_recorded(run.cfg, info), run.family.spec.denoiser)
    dataset = dataset_record_for(  # under the checkpoint's dataset rule (training/resume/identity_dataset.py)
        info["identity"],
        run.scan,
        lambda: rule1_fingerprint(run.cfg, info["config"], run.family.spec, settings),
    )
    check_identity(info["identity"], _identity(run, before, then, pixels, dataset))
    return run, identity


# the adapter's shape a run from init_lora took from its file where the user left it unset
_FILE_RANKS = ("lora_rank", "lora_alpha", "rank_pattern")


def _checkpoint_ranks(cfg: TrainConfig, info: dict[str, Any]) -> TrainConfig:
    """A resume's `cfg` with init_lora and lora_rank / lora_alpha / rank_pattern unset: those the
    checkpoint's run took from its init file (training/adapters/init_lora.py), so that the resume needs
    neither the file (it may be gone) nor its reading to equal the checkpoint's."""
    saved = info.get("config") or {}
    if cfg.init_lora is None:
        return cfg
    update = {k: saved[k] for k in _FILE_RANKS if getattr(cfg, k) is None and saved.get(k) is not None}
    return cfg.model_copy(update=update) if update else cfg


def _identity(
    run: PreparedRun,
    cfg: TrainConfig,
    base: dict[str, Any],
    pixels: dict[str, str],
    dataset: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The identity of `run` with the settings `cfg` (its own, or its steps before an extension):
    with the latent cache's size as the run sizes it (training/loop_inputs.run_latent_mode), so it
    records the latent handling the run has, and the pixel rule where its files need it
    (`pixels`: data/pixel_rule.read_otherwise of its scan); `dataset`: its dataset fields as a
    checkpoint compares them (identity_dataset.dataset_record_for; None: the scan's own, under
    the current rule)."""
    scan, spec = run.scan, run.family.spec
    return run_identity(
        cfg,
        dataset_record(scan) if dataset is None else dataset,
        spec.lora_targets,
        base,
        dataset_files(scan),
        run_cache_bytes(cfg, scan, spec),
        pixels,  # the pixel rule, where the data needs it (identity_rules.py)
    )


def resume_problems(cfg: TrainConfig, checkpoint: Path) -> list[FieldProblem]:
    """What refuses resuming `checkpoint` with `cfg` before anything is loaded or scanned: an
    output_name other than the checkpoint's folder, a finished run resumed without a larger
    total, a checkpoint with no step left. Reads only the checkpoint's info (cheap: the CLI asks
    before it records the run). Returns the problems ([] when none)."""
    run_dir = run_dir_of(checkpoint)
    info = read_checkpoint_info(checkpoint)
    old_total = int(info["total_steps"])
    extended = cfg.num_epochs == 0 and cfg.steps > old_total  # training it longer (training/resume/extend.py)
    total = cfg.steps if extended else old_total
    problems = []
    if cfg.output_name is not None and cfg.output_name != run_dir.name:
        problems.append(
            FieldProblem(
                "output_name", f"a resume continues in {run_dir}: leave it unset or {run_dir.name!r}"
            )
        )
    finished = finished_problem(run_dir, extended)
    if finished is not None:
        problems.append(finished)
    elif int(info["step"]) >= total:
        problems.append(
            FieldProblem(
                "resume",
                f"{checkpoint} is at step {info['step']} of {total}: nothing left "
                "(set steps above it to train longer)",
            )
        )
    return problems


def discard_session(run_dir: Path, resumed: bool, keeper: CheckpointKeeper | None) -> str | None:
    """Stop without save (or a fresh run stopped before its first step): remove what this
    session wrote. In a fresh run's folder that is every file a run writes (run_files.py), then
    the folder if nothing else is in it; a resumed run keeps what it started with (the keeper
    removes this session's checkpoints; the loop, its snapshots, samples and validation record).
    Returns `kept_note` when a fresh folder kept what the run did not write (logged), else None."""
    if not resumed:
        return _remove_fresh(run_dir)
    if keeper is not None:
        keeper.discard()
    return None


def clean_after_failure(run_dir: Path, resumed: bool, lora_written: bool = False) -> str | None:
    """A failed session: in a fresh folder without any checkpoint or written LoRA, what a run
    writes is removed, then the folder if nothing else is in it; otherwise the checkpoints stay
    resumable, the LoRA (`lora_written`: the run's final one, written before the failure in its
    final sample round) stays, and only staging leftovers go (a resume touches nothing else).
    Returns `kept_note` when a fresh folder kept what the run did not write (logged), else None."""
    if not resumed and not lora_written and not list_checkpoints(run_dir):
        return _remove_fresh(run_dir)
    remove_leftovers(run_dir)
    return None


def _remove_fresh(run_dir: Path) -> str | None:
    kept = remove_session_files(run_dir)
    if not kept:
        return None
    note = kept_note(run_dir, kept)
    log.warning("%s", note)
    return note
