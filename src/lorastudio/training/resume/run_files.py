"""What a session of a run writes in its run folder (outputs/<output_name>/): the one list, and
the removal that keeps everything else. No torch (the job service and the API use it).

Every writer of the engine takes its names here (the folders, the file names, the staging names),
and `owned` recognises exactly those, of the kind a run writes (a regular file; a real folder for
a checkpoint, a tracker or a staged write: never a link, FIFO, socket or device), so what a run
removes is what runs write:

    <name>.safetensors, <name>.json          the LoRA and its sidecar (training/adapters/export.py)
    <name>.raw.safetensors, <name>.raw.json  with EMA, the raw weights (training/ema.py)
    validation.json                          the validation record (training/validation_file.py)
    losses.bin                               the per-step losses, appended at each checkpoint
                                             (training/resume/loss_record.py)
    checkpoints/step-NNNNNN/                 a checkpoint, written whole (training/resume/checkpoint.py);
                                             with EMA it holds <name>-step-NNNNNN.ema.safetensors
                                             (+ .json): the EMA weights of that step (`ema_step_name`)
    loras/<name>-step-NNNNNN.safetensors     a LoRA snapshot, + .json (lora/snapshots.py)
    samples/step-NNNNNN-I.png, ref-I-S.png   previews, reference copies (training/sample_files.py)
    samples/<name>-step-NNNNNN.ema.safetensors  with EMA previews, the EMA weights of the newest
                                             previewed step no checkpoint keeps, + .json: one pair
                                             (training/ema_preview.py)
    tensorboard/, wandb/                     a tracker's own folder, whole (training/trackers.py)
    .staging-<hex>[.ext], .removing-<hex>    a write or delete in flight, in the run folder and in
                                             each folder above (`staging_path`, `removal_path`)
    .fresh-run                               a fresh session's mark while its folder holds no
                                             checkpoint and no LoRA (training/resume/fresh_mark.py)

The mark: a fresh run creates its folder (training/resume/run_lock.claim_run_dir refuses one that
exists) and marks it at once (fresh_mark.mark_fresh: bound to the folder's name and inode, naming
the run's record), and the mark goes when the folder first holds something to keep (its first
checkpoint, its LoRA: `settle`). So a folder that no live session holds, with its own mark
(fresh_mark.read_mark: not one copied in, not one of a folder renamed since, nothing else at that
name) and neither a checkpoint nor the run's LoRA (`killed_fresh`), is one whose only session was
killed (a worker, a rank, the server with it, a CLI run, a power cut): every listed entry in it
was written by that session, and goes (jobs/leftovers.py). A resumed session never marks: its
folder keeps everything of earlier sessions, only staging goes.

`remove_session_files` (a fresh run that failed or was stopped without save) removes what a
session writes, then the folders above and the run folder with rmdir only: a file or folder
someone else put there stays, with the folders holding it, and is returned (`kept_note` words
it for the log and the run record). `remove_leftovers` removes only the staging of writes that
never finished (a failed resume, a kept folder, a killed run: jobs/leftovers.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

from lorastudio.training.resume.folder_guard import check_folder
from lorastudio.training.resume.fresh_mark import FRESH_MARK, read_mark

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
LORAS = "loras"
SAMPLES = "samples"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
VALIDATION_FILE = "validation.json"
LOSSES_FILE = "losses.bin"  # the per-step losses the checkpoints name (training/resume/loss_record.py)
STAGING_PREFIX = ".staging-"
REMOVING_PREFIX = ".removing-"

WRITER_FOLDERS = (CHECKPOINTS, LORAS, SAMPLES)  # folders of named files (checked entry by entry)
TRACKER_FOLDERS = (TENSORBOARD, WANDB)  # what a tracker writes there is its own: owned whole

_CHECKPOINT = re.compile(r"^step-(\d+)$")
_SAMPLE = re.compile(r"^step-(\d{6,})-(\d+)\.png$")
_REFERENCE = re.compile(r"^ref-(\d+)-(\d+)\.png$")  # ref-<prompt index>-<slot>.png
_SNAPSHOT = re.compile(r"^(?P<run>.+)-step-(?P<step>\d{6,})\.(safetensors|json)$")
_EMA_PREVIEW = re.compile(r"^(?P<run>.+)-step-(?P<step>\d{6,})\.ema\.(safetensors|json)$")
_LEFTOVER = re.compile(r"^(\.staging-[0-9a-f]+(\.[a-z]+)?|\.removing-[0-9a-f-]+)$")


def staging_path(folder: Path, suffix: str = "") -> Path:
    """A fresh hidden staging name in `folder` (".staging-<hex><suffix>"): a write goes there,
    then is renamed into place; a kill leaves it, and `remove_leftovers` knows it."""
    return folder / f"{STAGING_PREFIX}{uuid.uuid4().hex[:8]}{suffix}"


def removal_path(folder: Path) -> Path:
    """A fresh hidden name in `folder` a folder is renamed to before it is deleted."""
    return folder / f"{REMOVING_PREFIX}{uuid.uuid4().hex[:8]}"


def is_leftover(name: str) -> bool:
    """Whether `name` is a staging or removal name (`staging_path`, `removal_path`)."""
    return _LEFTOVER.match(name) is not None


def checkpoint_name(step: int) -> str:
    """Folder name of the checkpoint after optimizer step `step` ("step-000123")."""
    return f"step-{step:06d}"


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder name, or None when the name is not one."""
    match = _CHECKPOINT.match(name)
    return int(match.group(1)) if match else None


def sample_name(step: int, index: int) -> str:
    """File name of the sample of prompt `index` after optimizer step `step`."""
    return f"step-{step:06d}-{index}.png"


def parse_sample_name(name: str) -> tuple[int, int] | None:
    """(step, prompt index) of a sample file name, or None when `name` is not one."""
    match = _SAMPLE.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def reference_name(index: int, slot: int) -> str:
    """File name of the copy of reference image `slot` of sample prompt `index`."""
    return f"ref-{index}-{slot}.png"


def parse_reference_name(name: str) -> tuple[int, int] | None:
    """(prompt index, slot) of a reference copy's file name, or None when `name` is not one."""
    match = _REFERENCE.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def snapshot_name(output_name: str, step: int) -> str:
    """File stem of the LoRA snapshot after optimizer step `step` ("my-run-step-000500")."""
    return f"{output_name}-step-{step:06d}"


def ema_step_name(output_name: str, step: int) -> str:
    """File stem of an EMA run's LoRA of the EMA weights after step `step`, kept in that step's
    checkpoint folder, so that the checkpoint limit removes it with its checkpoint
    ("my-run-step-000500.ema")."""
    return f"{snapshot_name(output_name, step)}.ema"


def ema_preview_step(output_name: str, name: str) -> int | None:
    """The step of run `output_name`'s kept EMA preview file name (samples/<name>-step-N.ema
    .safetensors or its .json), or None when the name is not one."""
    match = _EMA_PREVIEW.match(name)
    return int(match.group("step")) if match and match.group("run") == output_name else None


def snapshot_step(name: str) -> int | None:
    """The step of a snapshot's .safetensors file name, or None when the name is not one."""
    match = _SNAPSHOT.match(name)
    return int(match.group("step")) if match and name.endswith(".safetensors") else None


def final_names(output_name: str) -> tuple[str, ...]:
    """The run's LoRA files in its folder: the LoRA, its sidecar, and with EMA the raw pair."""
    return tuple(
        f"{output_name}{tail}" for tail in (".safetensors", ".json", ".raw.safetensors", ".raw.json")
    )


def owned(run_dir: Path, path: Path) -> bool:
    """Whether `path` (in `run_dir`, named as the module docstring lists) is an entry a session
    of the run writes: a unit removed whole. Its kind counts as well as its name: a run writes
    regular files, and real folders for a checkpoint or a staged write, never a link (to a file
    or a folder, in or outside the folder), a FIFO, a socket or a device: those are never owned,
    so no removal follows or takes one. The writer folders themselves are not (they are removed
    only when empty)."""
    kind = _owned_kind(run_dir, path)
    if kind is None:
        return False
    try:
        mode = path.lstat().st_mode
    except OSError:  # gone meanwhile
        return False
    if stat.S_ISDIR(mode):
        return kind in ("folder", "either")
    return stat.S_ISREG(mode) and kind in ("file", "either")


def written_name(run_dir: Path, path: Path) -> bool:
    """Whether a session of the run writes an entry at `path`'s name in `run_dir` (one or two
    levels down; a tracker's folder included), whatever is there now."""
    parts = path.relative_to(run_dir).parts
    return _owned_kind(run_dir, path) is not None or (len(parts) == 1 and parts[0] in TRACKER_FOLDERS)


def _owned_kind(run_dir: Path, path: Path) -> str | None:
    """What a session writes at `path`'s name: "file", "folder" (a checkpoint), "either" (a
    staging or removal name), or None when no session writes that name."""
    parts = path.relative_to(run_dir).parts
    if len(parts) == 1:
        (name,) = parts
        if is_leftover(name):
            return "either"
        return (
            "file"
            if name in final_names(run_dir.name) or name in (VALIDATION_FILE, LOSSES_FILE, FRESH_MARK)
            else None
        )
    if len(parts) != 2:
        return None
    folder, name = parts
    if is_leftover(name) and folder in WRITER_FOLDERS:
        return "either"
    if folder == CHECKPOINTS:
        return "folder" if checkpoint_step(name) is not None else None
    if folder == SAMPLES:
        sample = parse_sample_name(name) is not None or parse_reference_name(name) is not None
        return "file" if sample or ema_preview_step(run_dir.name, name) is not None else None
    if folder == LORAS:
        match = _SNAPSHOT.match(name)
        return "file" if match is not None and match.group("run") == run_dir.name else None
    return None


def killed_fresh(run_dir: Path) -> bool:
    """Whether `run_dir` (one no live session holds) is a fresh run's that was killed before it
    held anything to keep: its own mark (fresh_mark.read_mark) and no checkpoint and no LoRA of the run (a
    kill between their write and `settle` keeps the folder whole)."""
    if read_mark(run_dir) is None:  # none, or not one this folder's fresh session wrote
        return False
    if any(checkpoint_step(p.name) is not None for p in _children(run_dir / CHECKPOINTS)):
        return False
    loras = [name for name in final_names(run_dir.name) if name.endswith(".safetensors")]
    return not any((run_dir / name).exists() for name in loras)


def survey(run_dir: Path) -> tuple[list[Path], list[Path]]:
    """(owned, other): the entries of `run_dir` a session writes (`owned`: tracker folders and
    checkpoints whole), and every other entry (a folder that is not a writer folder whole), each
    list sorted. The writer folders themselves are in neither."""
    mine: list[Path] = []
    other: list[Path] = []
    for entry in _children(run_dir):
        if entry.name in WRITER_FOLDERS and entry.is_dir() and not entry.is_symlink():
            for inner in _children(entry):
                (mine if owned(run_dir, inner) else other).append(inner)
        elif entry.name in TRACKER_FOLDERS and entry.is_dir() and not entry.is_symlink():
            mine.append(entry)
        else:
            (mine if owned(run_dir, entry) else other).append(entry)
    return sorted(mine), sorted(other)


def remove_session_files(run_dir: Path) -> list[str]:
    """Remove what a session of the run writes in `run_dir` (`survey`), its fresh mark last (a
    removal cut short, a rank SIGTERMed by torchrun, leaves a marked folder the next clean-up
    finishes, RELIABILITY 987), then each writer folder and `run_dir` itself if empty (rmdir
    only). Returns what was kept, relative to `run_dir` (a folder with a trailing "/"), sorted:
    what the run did not write; [] when the folder is gone. A removal that fails is logged, and
    its entry keeps the folder."""
    mine, _ = survey(run_dir)
    for path in sorted(mine, key=lambda p: p.name == FRESH_MARK):  # the mark last
        try:
            remove_entry(run_dir, path)
        except OSError as err:
            log.warning("could not remove %s: %s", path, err)
    for folder in (*WRITER_FOLDERS, ""):
        target = run_dir / folder if folder else run_dir
        if target.is_dir() and not target.is_symlink():
            with contextlib.suppress(OSError):  # not empty: something the run did not write
                target.rmdir()
    if not run_dir.is_dir():
        return []
    _, other = survey(run_dir)  # (what a failed removal left is logged above)
    return entry_names(run_dir, other)


def entry_names(run_dir: Path, paths: list[Path]) -> list[str]:
    """`paths` relative to `run_dir`, a folder with a trailing "/", sorted."""
    return sorted(p.relative_to(run_dir).as_posix() + ("/" if _is_folder(p) else "") for p in paths)


def kept_note(run_dir: Path, kept: list[str]) -> str:
    """The sentence the log and the run record carry when `kept` (remove_session_files) stayed:
    "kept 1 file not written by the run in outputs/x: notes.txt"."""
    folders = sum(k.endswith("/") for k in kept)
    files = len(kept) - folders
    counts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((files, "file"), (folders, "folder")) if n]
    return f"kept {' and '.join(counts)} not written by the run in {run_dir}: {', '.join(kept)}"


def leftovers(run_dir: Path) -> list[Path]:
    """The staging and removal entries of writes that never finished in `run_dir` and its writer
    folders (never inside a checkpoint or a tracker folder), sorted."""
    found = _children(run_dir, is_leftover)
    for folder in WRITER_FOLDERS:
        if not (run_dir / folder).is_symlink():
            found += _children(run_dir / folder, is_leftover)
    return sorted(p for p in found if _is_file_or_folder(p))  # a link of that name: not a write's


def remove_leftovers(run_dir: Path) -> None:
    """Remove `leftovers(run_dir)`: call only while no write of the run is in flight (the
    session's own thread, or a folder no live session holds)."""
    for path in leftovers(run_dir):
        try:
            remove_entry(run_dir, path)
        except OSError as err:
            log.warning("could not remove the staging leftover %s: %s", path, err)


def remove_entry(run_dir: Path, path: Path) -> None:
    """Remove entry `path` of `run_dir` (at most two levels down: a run's entry, a writer
    folder's entry) without following a link on the way: `run_dir` and the folder between are
    opened with O_NOFOLLOW and the entry is removed relative to its folder's descriptor, so a
    folder swapped for a link after `path` was listed raises OSError (ELOOP, ENOTDIR) instead of
    removing the same name elsewhere. A file (or a link itself) is unlinked; a real folder is
    removed whole (rmtree by descriptor, links in it unlinked, never followed) only where a run
    writes a folder at that name (`_owned_kind`: a checkpoint, a staged write, a tracker's).
    A missing entry: nothing."""
    parts = path.relative_to(run_dir).parts
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"{path} is not an entry of {run_dir}")
    check_folder(run_dir)  # a live session's own folder only (folder_guard.py; none held: no check)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(run_dir, flags)
    try:
        for part in parts[:-1]:
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
        name = parts[-1]
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(mode):
            os.unlink(name, dir_fd=fd)
        elif _owned_kind(run_dir, path) in ("folder", "either") or (
            len(parts) == 1 and name in TRACKER_FOLDERS
        ):
            shutil.rmtree(name, dir_fd=fd)
        else:
            raise IsADirectoryError(f"{path} is a folder now; a run writes a file there")
    finally:
        os.close(fd)


def _is_file_or_folder(path: Path) -> bool:
    """Whether `path` is a regular file or a real folder (not a link, FIFO, socket, device)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _children(folder: Path, named: Callable[[str], bool] | None = None) -> list[Path]:
    """The entries of `folder` (`named`: only those whose name it takes, no Path made for the
    others: a long run's samples/ at every server start)."""
    try:
        return [folder / name for name in os.listdir(folder) if named is None or named(name)]
    except OSError:  # missing, a link to nowhere, or not a folder
        return []
