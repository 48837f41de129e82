"""Checkpoint folders of a run: layout, atomic writing, finding, reading, retention. No torch here
(what goes inside a checkpoint is training/resume/snapshot.py's business).

Layout: <run_dir>/checkpoints/step-000123/
    lora.safetensors   the LoRA weights (peft naming, fp32)
    state.pt           optimizer, LR scheduler, GradScaler, RNG states, sampler position, meters
    identity.json      {"format", "step", "total_steps", "identity", "config", "plan", "created_at", ...}
                       ("plan": the memory plan the run used, training/planning/plan.py; a resume reuses it)

A checkpoint folder is written under a hidden staging name, every file fsynced, then renamed into
place (and the parent fsynced), so a folder named step-N is always complete. `keep_last` newest
checkpoints are retained; checkpoints that existed before this session are only removed when the
session ends well (`CheckpointKeeper.finish`), so a discarded resume leaves them untouched.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.durable import fsync_path
from lorastudio.errors import ConfigError, FieldProblem, NotFound, writing
from lorastudio.folder_entries import entries
from lorastudio.training.resume.extend import extension_steps
from lorastudio.training.resume.folder_guard import check_folder, replace_in_run
from lorastudio.training.resume.fresh_mark import settle
from lorastudio.training.resume.identity import IDENTITY_FORMAT, UNUSED_REVISION, override_problems
from lorastudio.training.resume.run_files import (
    CHECKPOINTS,
    checkpoint_name,
    removal_path,
    remove_leftovers,
    staging_path,
)
from lorastudio.training.resume.run_files import checkpoint_step as _step_of_name
from lorastudio.user_paths import is_dir, is_file

INFO_FILE = "identity.json"
STATE_FILE = "state.pt"
LORA_FILE = "lora.safetensors"
CHECKPOINT_FILES = (INFO_FILE, STATE_FILE, LORA_FILE)
PLAN_KEY = "plan"  # identity.json: the run's plan (absent in checkpoints written before plans)


def checkpoint_step(path: Path) -> int | None:
    """The step of a checkpoint folder name, or None when the name is not one."""
    return _step_of_name(path.name)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The complete checkpoint folders of `run_dir`, oldest step first (staging folders and
    folders missing a file are ignored)."""
    folder = run_dir / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = [
        p
        for p in entries(folder)  # gone since the check (a run delete): none
        if checkpoint_step(p) is not None and p.is_dir() and all((p / f).is_file() for f in CHECKPOINT_FILES)
    ]
    return sorted(found, key=lambda p: checkpoint_step(p) or 0)


def find_checkpoint(path: Path) -> Path:
    """The checkpoint to resume from: `path` itself when it is a checkpoint folder, else the
    newest checkpoint of the run folder `path`. Raises NotFound."""
    if is_file(path / INFO_FILE):  # user_paths: a path over the file system's limits is not there
        if checkpoint_step(path) is None or any(not (path / f).is_file() for f in CHECKPOINT_FILES):
            raise NotFound(
                f"{path} is not a complete checkpoint folder (needs {', '.join(CHECKPOINT_FILES)})"
            )
        return path
    if not is_dir(path):
        raise NotFound(f"no run folder or checkpoint at {path}")
    found = list_checkpoints(path)
    if not found:
        raise NotFound(
            f"{path} holds no checkpoint to resume from (checkpoints are written every save_every "
            "steps and on stop-and-save)"
        )
    return found[-1]


def run_dir_of(checkpoint: Path) -> Path:
    """The run folder a checkpoint folder belongs to (<run_dir>/checkpoints/step-N)."""
    return checkpoint.parent.parent


def read_checkpoint_info(checkpoint: Path) -> dict[str, Any]:
    """The parsed identity.json of a checkpoint. Raises ConfigError (field "resume") when it is
    unreadable or not a checkpoint description of this format."""
    path = checkpoint / INFO_FILE
    try:
        info = json_read.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError([FieldProblem("resume", f"cannot read {path}: {err}")]) from None
    keys = ("step", "total_steps", "identity", "config")
    if (
        not isinstance(info, dict)
        or info.get("format") != IDENTITY_FORMAT
        or any(k not in info for k in keys)
    ):
        raise ConfigError(
            [FieldProblem("resume", f"{path} is not a {IDENTITY_FORMAT} checkpoint description")]
        )
    return _without_unused_revision(info)


def _without_unused_revision(info: dict[str, Any]) -> dict[str, Any]:
    """`info` without a revision its run recorded beside a local base model (folder, or a single
    file's local base_config): before RELIABILITY 411 such a revision was taken and ignored (the
    run trained on the folder), and is refused now; the run's maths never depended on it, so
    its resume continues without it (dropped from the config and the identity alike, kept as
    UNUSED_REVISION: the base fingerprint the run recorded was computed with it,
    training/resume/identity.config_as_recorded) rather than being refused for a setting it
    never used. An owner/name under models/ with a revision is refused by the resolver on
    resume, naming revision (only the disk tells it is a folder)."""
    from lorastudio.config import local_revision_problem

    config = info["config"]
    if not isinstance(config, Mapping) or not isinstance(config.get("revision"), str):
        return info
    base_model, base_config = config.get("base_model"), config.get("base_config")
    if not isinstance(base_model, str) or not local_revision_problem(
        base_model, config["revision"], base_config if isinstance(base_config, str) else None
    ):
        return info
    identity = info["identity"]
    if isinstance(identity, Mapping) and "revision" in identity:
        identity = {**identity, "revision": None}
    return {
        **info, "config": {**config, "revision": None}, "identity": identity, UNUSED_REVISION: config["revision"]
    }  # fmt: skip


def checkpoint_plan(info: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The plan recorded in a checkpoint's identity.json (read_checkpoint_info), or None for a
    checkpoint written before plans were recorded. Raises ConfigError (field "resume") when it
    is there but not a mapping."""
    plan = info.get(PLAN_KEY)
    if plan is not None and not isinstance(plan, Mapping):
        raise ConfigError([FieldProblem("resume", f"malformed plan in the checkpoint: {plan!r}")])
    return plan


def resume_settings(info: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The raw settings of a resumed run: the checkpoint's resolved config with `overrides` (only
    settings that do not change the maths, and `steps` above the run's total: training it longer,
    training/resume/extend.py). Raises ConfigError naming each refused override."""
    extended = extension_steps(info, overrides) is not None
    problems = override_problems({k: v for k, v in overrides.items() if not (extended and k == "steps")})
    if problems:
        raise ConfigError(problems)
    return {**dict(info["config"]), **dict(overrides)}


def write_checkpoint_folder(run_dir: Path, step: int, write_files: Callable[[Path], None]) -> Path:
    """Write checkpoint `step` atomically: `write_files(staging)` fills a hidden staging folder,
    which is fsynced and renamed to checkpoints/step-N. Returns the checkpoint folder. An existing
    checkpoint of the same step is replaced. On failure nothing is left behind; a write the file
    system refused is NoSpaceLeft / WriteFailed naming the checkpoint and the file."""
    parent = run_dir / CHECKPOINTS
    check_folder(run_dir)  # not a folder put at its path since the run started (folder_guard.py)
    parent.mkdir(exist_ok=True)
    final = parent / checkpoint_name(step)
    staging = staging_path(parent)
    check_folder(parent)
    staging.mkdir()
    try:
        with writing(f"the checkpoint {final.name} could not be written", final):  # full, EFBIG, ...
            write_files(staging)
        missing = [f for f in CHECKPOINT_FILES if not (staging / f).is_file()]
        if missing:
            raise OSError(f"checkpoint {final.name} was written without {', '.join(missing)}")
        for item in staging.iterdir():
            fsync_path(item)
        fsync_path(staging)
        check_folder(parent)  # the staging is in the run's folder: so is the checkpoint
        if final.exists():
            _remove(final)
        replace_in_run(staging, final)  # in the folder it started in, whatever took its path
        fsync_path(parent)
        settle(run_dir)  # a fresh run's folder now holds a checkpoint: a kill keeps it whole
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _remove(folder: Path) -> None:
    """Remove a folder in one visible step: rename it aside, then delete it."""
    check_folder(folder.parent)  # another's folder at the run's path: nothing of it goes
    trash = removal_path(folder.parent)
    os.rename(folder, trash)
    shutil.rmtree(trash)


class CheckpointKeeper:
    """Checkpoint bookkeeping of one session of a run (a fresh run, or one resume of it).

    `due(step, total)`: whether the periodic checkpoint falls on `step` (every `save_every`
    steps, not at the final step: the final LoRA is the run's result). `record(path)` registers
    a written checkpoint and removes this session's checkpoints beyond the `keep_last` newest.
    `finish()` (the session ended well) applies `keep_last` to every checkpoint of the folder.
    `discard()` removes the checkpoints written by this session and any staging leftovers.
    """

    def __init__(self, run_dir: Path, save_every: int | None, keep_last: int):
        self.run_dir = run_dir
        self.save_every = save_every
        self.keep_last = keep_last
        self.preexisting = set(list_checkpoints(run_dir))
        self.written: list[Path] = []

    def due(self, step: int, total_steps: int) -> bool:
        return self.save_every is not None and step % self.save_every == 0 and step < total_steps

    def record(self, checkpoint: Path) -> None:
        if checkpoint not in self.written:
            self.written.append(checkpoint)
        self._prune(include_preexisting=False)

    def finish(self) -> None:
        self._prune(include_preexisting=True)
        remove_leftovers(self.run_dir)

    def discard(self) -> None:
        for checkpoint in self.written:
            if checkpoint.exists() and checkpoint not in self.preexisting:
                _remove(checkpoint)
        self.written = []
        remove_leftovers(self.run_dir)
        parent = self.run_dir / CHECKPOINTS
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()

    def _prune(self, include_preexisting: bool) -> None:
        everything = list_checkpoints(self.run_dir)
        excess = everything[: max(0, len(everything) - self.keep_last)]
        for checkpoint in excess:
            if include_preexisting or checkpoint not in self.preexisting:
                _remove(checkpoint)
                if checkpoint in self.written:
                    self.written.remove(checkpoint)
