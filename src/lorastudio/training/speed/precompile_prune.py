"""Pruning the saved Dynamo graphs (`<Inductor's cache>/lorastudio-dynamo/<key>/`, training/
precompile.py) that no run has used for KEEP_DAYS days (RELIABILITY 1772).

A key is what one block class of one model under one torch / lorastudio / settings traces to:
another torch, a lorastudio upgrade or a model no longer trained leaves its key's files for ever
(MBs a graph). Now:

- a process that uses a key (loads or saves in it) takes a shared `flock` on `<key>/.in-use` for
  its whole life (`mark_in_use`; the kernel drops it when the process ends, killed or not) and
  sets that file's time to now: the key's "last used";
- `prune_keys` (at a compiled run's start, through `saved_functions`, and by `lorastudio cache
  prune`) removes each key last used more than KEEP_DAYS days ago (a key of an older version,
  without `.in-use`: its newest file's time) whose `.in-use` it can lock exclusively: never one
  a live process holds. A kept key loses the staging files of savers that were killed
  (staged_files.remove_killed_staging, as the next save into it did since fix 1741). A removed
  key is renamed aside first, then deleted: a process that opens it meanwhile finds its lock file
  gone and makes the key again (`mark_in_use` checks the file it locked is still the one there).
  Each removal is logged and returned (what, how big, when last used).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from lorastudio.compile_cache import chosen_compile_cache
from lorastudio.staged_files import TMP, remove_killed_staging

log = logging.getLogger(__name__)

FOLDER = "lorastudio-dynamo"  # under Inductor's cache folder in use
KEEP_DAYS = 30  # a key no run used for this many days is removed
IN_USE = ".in-use"  # the lock file of a key folder (its time: when a run last used the key)
OLDER_STAGING = re.compile(r"^\..+\.(bin|refused)\.[a-z0-9_]{8}\.tmp$")  # mkstemp's, before fix 1741
_ASIDE = ".pruning-"  # a key folder renamed aside before it is deleted
_HELD: dict[str, int] = {}  # key folder -> the descriptor this process's shared lock is on


@dataclass
class Removed:
    """One key folder removed: its path, bytes and when a run last used it (epoch seconds)."""

    path: Path
    bytes: int
    last_used: float


@dataclass
class DynamoPrune:
    """What `prune_keys` did."""

    removed: list[Removed] = field(default_factory=list)
    in_use: list[Path] = field(default_factory=list)  # old keys a live process holds: kept
    staging: list[Path] = field(default_factory=list)  # killed savers' staging files removed


def dynamo_root(home: Path) -> Path:
    """The saved graphs' folder a run of studio home `home` uses, without importing torch: in the
    user's TORCHINDUCTOR_CACHE_DIR, else in `<home>/cache/inductor` (compile_cache.py)."""
    return (chosen_compile_cache() or home / "cache" / "inductor") / FOLDER


def mark_in_use(folder: Path) -> None:
    """Hold a shared lock on `folder`/.in-use for this process's life (once per folder) and set its
    time to now. Raises OSError when the folder cannot be made or locked (the caller logs it)."""
    if str(folder) in _HELD:
        return
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / IN_USE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a prune decides on this key
            try:
                same = os.stat(folder / IN_USE).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:  # the prune removed the key meanwhile: make it again
                same = False
            if same:
                os.utime(fd)
                _HELD[str(folder)] = fd
                return
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _last_used(folder: Path) -> float:
    """When a run last used the key: its lock file's time, else (a key of an older version) its
    newest entry's."""
    try:
        return os.stat(folder / IN_USE).st_mtime
    except FileNotFoundError:
        pass
    times = [folder.stat().st_mtime]
    for entry in folder.iterdir():
        try:
            times.append(entry.lstat().st_mtime)
        except FileNotFoundError:
            continue
    return max(times)


def _size(folder: Path) -> int:
    total = 0
    for entry in folder.rglob("*"):
        try:
            st = entry.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


def prune_keys(root: Path, keep_days: float = KEEP_DAYS, now: float | None = None) -> DynamoPrune:
    """Remove the key folders under `root` (the lorastudio-dynamo folder) that no run used for
    `keep_days` days and no live process holds; remove killed savers' staging files from the
    others. A folder that cannot be read or removed is logged and kept. See the module docstring."""
    result = DynamoPrune()
    if not root.is_dir():
        return result
    cutoff = (time.time() if now is None else now) - keep_days * 86400
    try:
        folders = sorted(root.iterdir())
    except OSError as err:
        log.warning("precompile: could not read %s to prune it: %s", root, err)
        return result
    for folder in folders:
        if folder.name.startswith(_ASIDE) and folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)  # a prune killed between rename and delete
            continue
        if not folder.is_dir() or folder.is_symlink() or folder.name.startswith("."):
            continue
        try:
            _prune_one(folder, cutoff, result)
        except OSError as err:
            log.warning("precompile: could not prune the saved graphs in %s: %s", folder, err)
    return result


def _prune_one(folder: Path, cutoff: float, result: DynamoPrune) -> None:
    last = _last_used(folder)
    held = str(folder) in _HELD
    if last >= cutoff or held:
        if not held:
            result.staging += remove_killed_staging(folder, TMP, older=OLDER_STAGING)
        return
    fd = os.open(folder / IN_USE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live process uses it (a run of more than keep_days)
            result.in_use.append(folder)
            return
        size = _size(folder)
        aside = folder.with_name(f"{_ASIDE}{folder.name}-{os.getpid()}")
        folder.rename(aside)
        shutil.rmtree(aside)
    finally:
        os.close(fd)
    days = (time.time() - last) / 86400
    log.warning(
        "precompile: removed the saved graphs %s (%.1f MB), unused for %.0f days", folder, size / 2**20, days
    )
    result.removed.append(Removed(folder, size, last))
