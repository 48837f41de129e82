"""Who owns a staging folder under `datasets/.uploads/` (an upload's, a dataset import's, a kohya
import's): its writer holds an flock on an owner file beside it, `<folder>.owner`, for as long as
it writes there, and the kernel drops that lock when the writer dies, even by SIGKILL. So a
staging folder whose owner file's lock is free was left by a killed writer and may be removed by
anyone at any time, while one whose lock is held is never touched (no torch, no HTTP).

The owner file is made (and locked) before its folder and removed after it, so a folder seen
with no owner file is not of this rule: one left by an older lorastudio or a hand-made one
("unknown"), as is every folder on a file system without flock (some network file systems).
A server start removes those too (it holds the home lock; jobs/leftovers.py); the clean-up at the
start of a CLI command (`remove_stale_staging`) leaves them.

A remover holds the owner's lock while it removes, and a writer checks after taking its lock that
its owner file is still the one at its name (else it starts again under a new name), so a remover
that took a just-made owner file's lock before its writer did never removes a folder in use.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
import uuid
from enum import Enum
from pathlib import Path

STAGING_DIR = ".uploads"  # hidden folder under the datasets root (ignored by dataset listings)
OWNER_SUFFIX = ".owner"
log = logging.getLogger("lorastudio.data")


class Owner(Enum):
    """What the owner file of a staging entry says."""

    HELD = "held"  # a live writer holds it: never removed
    FREE = "free"  # its writer died (the kernel dropped the lock): removable
    UNKNOWN = "unknown"  # no owner file, or no flock on this file system: only a server start removes it


def owner_file(folder: Path) -> Path:
    """The owner file of staging folder `folder`: `<folder>.owner` beside it."""
    return folder.with_name(folder.name + OWNER_SUFFIX)


def make_owned(parent: Path, prefix: str = "") -> tuple[Path, int | None]:
    """A new staging folder `<parent>/<prefix><32 hex>`, owned by this process: returns (its path,
    the owner file's descriptor, locked; None where the file system has no flock). Keep the
    descriptor open while writing there, then `release`. `parent` must exist: FileNotFoundError
    when it went meanwhile (an upload's exit removes the empty staging root: make it, try again)."""
    while True:
        folder = parent / f"{prefix}{uuid.uuid4().hex}"
        owner = owner_file(folder)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        opened = os.open(owner, flags, 0o666)
        fd: int | None = opened
        try:
            fcntl.flock(opened, fcntl.LOCK_EX)  # waits only while a remover holds it
        except OSError:  # no flock here: the folder is "unknown" to every remover but a server start
            os.close(opened)
            fd = None
        if fd is not None and not _is_at(opened, owner):  # a remover took it meanwhile: a new name
            os.close(opened)
            continue
        try:
            folder.mkdir()
        except BaseException:
            release(folder, fd)
            raise
        return folder, fd


def release(folder: Path, fd: int | None) -> None:
    """End this process's ownership of `folder` (already removed or renamed away by the caller):
    remove its owner file, then drop the lock."""
    with contextlib.suppress(OSError):
        owner_file(folder).unlink()
    if fd is not None:
        os.close(fd)


def owner_state(entry: Path) -> Owner:
    """Whether staging `entry` (a folder or its owner file) is held by a live writer, free, or not
    of this rule. Asks the lock without waiting and drops it at once."""
    with _taken(entry) as state:
        return state


def remove_unless_held(entry: Path, unknown_too: bool) -> bool:
    """Remove staging `entry` (a folder with its owner file, or an owner file alone) when no live
    writer holds it, under its lock; an entry not of this rule (Owner.UNKNOWN: no owner file, no
    flock, not a folder) only with `unknown_too` (a server start, which holds the home lock).
    Returns whether anything was removed. Raises OSError when the removal fails."""
    is_owner = entry.name.endswith(OWNER_SUFFIX)
    folder = entry.with_name(entry.name[: -len(OWNER_SUFFIX)]) if is_owner else entry
    with _taken(entry) as state:
        if state is Owner.HELD or (state is Owner.UNKNOWN and not unknown_too):
            return False
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
        elif os.path.lexists(folder) and (not is_owner or unknown_too):
            folder.unlink()  # a file or link among the staging: not of this rule
        with contextlib.suppress(FileNotFoundError):
            owner_file(folder).unlink()
        return True


def stale_entries(datasets_dir: Path, unknown_too: bool) -> list[Path]:
    """The entries of `datasets/.uploads/` no live writer holds (a folder stands for its owner
    file too; an owner file alone is listed), those not of this rule only with `unknown_too`.
    Judged now: remove each with `remove_unless_held`, which judges again under the lock."""
    root = datasets_dir / STAGING_DIR
    try:
        names = set(os.listdir(root))
    except OSError:  # no staging root (or not a folder)
        return []
    found = []
    for name in sorted(names):
        if name.endswith(OWNER_SUFFIX) and name[: -len(OWNER_SUFFIX)] in names:
            continue  # judged with its folder
        state = owner_state(root / name)
        if state is Owner.FREE or (state is Owner.UNKNOWN and unknown_too):
            found.append(root / name)
    return found


def remove_stale_staging(datasets_dir: Path) -> list[Path]:
    """Remove what killed writers left in `datasets/.uploads/` (every entry whose owner lock is
    free), as a CLI command that touches datasets starts, beside any live server, import or
    upload (whose staging is held, so kept). Entries not of this rule are left to a server start.
    A killed upload's staging is the mark of a copy it may have left in a dataset on another file
    system (data/cross_device.py): when one was removed, those copies whose writer is gone are
    removed too (`killed_copies`: each dataset's top level and control folders, by name), so a
    command without a server does not read every dataset each time. Returns the removed entries
    (the caller tells them); one that cannot be removed is logged and kept."""
    removed: list[Path] = []
    for entry in stale_entries(datasets_dir, unknown_too=False):
        try:
            if remove_unless_held(entry, unknown_too=False):
                removed.append(entry)
        except OSError as err:
            log.warning("could not remove the staging a killed import or upload left, %s: %s", entry, err)
    with contextlib.suppress(OSError):  # still holds a live writer's staging
        (datasets_dir / STAGING_DIR).rmdir()
    return removed + (_remove_killed_copies(datasets_dir) if removed else [])


def _remove_killed_copies(datasets_dir: Path) -> list[Path]:
    """Remove the copies killed cross-device moves left in the datasets of `datasets_dir`
    (data/cross_device.killed_copies); one that cannot be removed is logged and kept."""
    from lorastudio.data.cross_device import killed_copies  # numpy and PIL: only when needed

    removed: list[Path] = []
    try:
        datasets = [Path(e.path) for e in os.scandir(datasets_dir) if not e.name.startswith(".")]
    except OSError:
        return []
    for dataset in sorted(datasets):
        if dataset.is_symlink() or not dataset.is_dir():
            continue
        for copy in killed_copies(dataset):
            try:
                copy.unlink()
            except FileNotFoundError:  # removed meanwhile
                continue
            except OSError as err:
                log.warning("could not remove the copy a killed upload left, %s: %s", copy, err)
                continue
            removed.append(copy)
    return removed


class _taken(contextlib.AbstractContextManager[Owner]):
    """The owner lock of staging `entry` taken without waiting, for the block: Owner.FREE (held
    by the caller until the block ends), Owner.HELD or Owner.UNKNOWN."""

    def __init__(self, entry: Path):
        self.entry = entry
        self.fd: int | None = None

    def __enter__(self) -> Owner:
        owner = self.entry if self.entry.name.endswith(OWNER_SUFFIX) else owner_file(self.entry)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(owner, flags)
        except OSError:  # none (an older lorastudio's staging, a hand-made entry) or a link
            return Owner.UNKNOWN
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError("not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return Owner.HELD
        except OSError:  # no flock on this file system, or no owner file of ours
            os.close(fd)
            return Owner.UNKNOWN
        if not _is_at(fd, owner):  # its writer released it meanwhile: nothing to judge
            os.close(fd)
            return Owner.HELD
        self.fd = fd
        return Owner.FREE

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path` (not unlinked or replaced)."""
    try:
        here = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)
