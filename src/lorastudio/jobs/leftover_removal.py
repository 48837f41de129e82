"""Removing the crash leftovers jobs/leftovers.py lists (a server start's, `lorastudio train`'s):
folders with their content, files, a run's output folder only while it holds nothing but empty
folders, what a run wrote through no link (training/resume/run_files.remove_entry), an upload's staging
only while no live writer holds it (data/staging_owner.py). No torch, no HTTP."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from lorastudio.data.staging_owner import STAGING_DIR, remove_unless_held
from lorastudio.training.resume.fresh_mark import FRESH_MARK
from lorastudio.training.resume.run_files import WRITER_FOLDERS, remove_entry, written_name

log = logging.getLogger("lorastudio.jobs")

UPLOAD_STAGING = STAGING_DIR  # data/staging_owner.py: datasets/.uploads, its writers' staging


def remove_leftovers(paths: list[Path]) -> tuple[int, int]:
    """Remove `paths` (folders with their content, or files; deepest first), logging each with
    its size; a run's output folder (`_is_run_folder`) only while it holds nothing but empty
    folders (rmdir, bottom up: a file that landed in it since it was found empty is kept, and
    so is the folder), and a writer folder of one (`_is_writer_folder`) only when empty, else
    kept silently (what the run did not write, logged with its folder). Returns (files, bytes)
    removed. A path that cannot be removed is logged
    and skipped."""
    total_files = total_bytes = 0
    # deepest first; a fresh run's mark after the other entries of its folder, before the folder:
    # a removal cut short leaves the folder marked for the next clean-up (RELIABILITY 987)
    for path in sorted(paths, key=lambda p: -len(p.parts) + (0.5 if p.name == FRESH_MARK else 0)):
        files, size = _size(path)
        try:
            if _is_writer_folder(path):
                with contextlib.suppress(OSError):  # holds what the run did not write: kept, logged
                    path.rmdir()
                continue
            if path.parent.name == UPLOAD_STAGING:
                if not remove_unless_held(path, unknown_too=True):  # taken by a live writer since
                    continue
            elif _is_run_folder(path):
                _remove_empty_tree(path)
            elif (run := _output_folder_of(path)) is not None:
                remove_entry(run, path)  # no link followed on the way (one swapped in since the listing)
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as err:
            log.warning("could not remove the crash leftover %s: %s", path, err)
            continue
        total_files += files
        total_bytes += size
        log.warning("removed the crash leftover %s (%d files, %.1f MB)", path, files, size / 2**20)
    parent = [p.parent for p in paths if p.parent.name == UPLOAD_STAGING]
    for folder in set(parent):
        with contextlib.suppress(OSError):  # still holds a new upload's staging folder
            folder.rmdir()
    return total_files, total_bytes


def _is_run_folder(path: Path) -> bool:
    """Whether leftover `path` is a run's output folder (`outputs/<run>`, found holding nothing),
    not a staging folder (every one of those is hidden, or inside datasets/.uploads)."""
    return path.parent.name == "outputs" and not path.name.startswith(".")


def _output_folder_of(path: Path) -> Path | None:
    """The run's output folder `outputs/<run>` that leftover `path` is an entry of, at a name a
    run writes (one or two levels down: run_files.remove_entry), or None."""
    for run in (path.parent, path.parent.parent):
        if _is_run_folder(run) and written_name(run, path):
            return run
    return None


def _is_writer_folder(path: Path) -> bool:
    """Whether leftover `path` is a writer folder of a killed fresh run's output folder
    (`outputs/<run>/samples`, ...): removed only when empty."""
    return path.parent.parent.name == "outputs" and path.name in WRITER_FOLDERS and not path.is_symlink()


def _remove_empty_tree(folder: Path) -> None:
    """Remove `folder` and the empty folders in it, bottom up, with rmdir only: raises OSError
    (ENOTEMPTY, ENOTDIR for a link) when anything else is in it, removing no file."""
    if folder.is_symlink():
        raise NotADirectoryError(f"{folder} is a link")
    for root, _dirs, _files in os.walk(folder, topdown=False):
        os.rmdir(root)


def _size(path: Path) -> tuple[int, int]:
    """(files, bytes) under `path` (a file: 1 and its size)."""
    if not path.is_dir() or path.is_symlink():
        with contextlib.suppress(OSError):
            return 1, path.lstat().st_size
        return 0, 0
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            files += 1
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(root, name)).st_size
    return files, size
