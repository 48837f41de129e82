"""The run folder a live session writes, checked right before each write (no torch).

A session holds its run folder open (training/resume/run_lock.py: the descriptor of its claim or lock)
and registers it here (`hold`, until `drop`). Its writers still write by path (a checkpoint's
staging folder and rename, a LoRA snapshot, sample PNGs, the final LoRA and sidecar, the
validation record, a tracker's folder), so a folder renamed while the run was live, and another
put at its path (another run's, a link to a folder outside), would take them: the LoRA's rename
could replace another run's of that name. Each writer calls `check_folder` with the folder its
write lands in, right before it creates anything there and again right before its rename into
place (and before it removes anything there: a pruned checkpoint or snapshot, the fresh mark).
The check costs two stats (no per-step cost: writes only). When the folder at the run's path is
no longer the one the session holds, or a folder between it and the write is a link,
RunFolderMoved fails the run naming the folder; nothing is written there, and the failed run
removes nothing (run_lock.holds, training/loop.py). A path in no held folder (a rank that holds
no lock, a writer called outside a run) is not checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lorastudio.errors import RunFolderMoved

_held: dict[Path, int] = {}  # run folder (as the session names it) -> its descriptor


def hold(run_dir: Path, fd: int) -> None:
    """Register `run_dir`, opened (and locked) as `fd` by this process's session."""
    _held[run_dir] = fd


def drop(fd: int | None) -> None:
    """Forget the run folder held as `fd` (the session ends; None: none)."""
    for run_dir in [d for d, held in _held.items() if held == fd]:
        del _held[run_dir]


def check_folder(folder: Path) -> None:
    """Raise RunFolderMoved when `folder` is, or lies in, a run folder this process holds and
    the folder at that path is no longer the held one (renamed away, replaced by another folder
    or a link, gone), or a folder between the run folder and `folder` is a link (or not a
    folder). A folder in none held: nothing. Call right before a write lands in `folder`."""
    for run_dir, fd in _held.items():
        if folder != run_dir and run_dir not in folder.parents:
            continue
        if not _same(fd, run_dir):
            raise RunFolderMoved(run_dir)
        inner = run_dir
        for part in folder.relative_to(run_dir).parts:
            inner = inner / part
            try:
                mode = os.stat(inner, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return  # not made yet: the writer makes it (its parent was checked)
            except OSError:
                raise RunFolderMoved(run_dir) from None
            if not stat.S_ISDIR(mode):
                raise RunFolderMoved(run_dir, f"{inner} is not a folder of the run (a link or a file)")
        return


def _same(fd: int, run_dir: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(run_dir, follow_symlinks=False))
    except OSError:
        return False


def replace_in_run(source: Path, target: Path) -> None:
    """`os.replace(source, target)`, made through the held run folder's descriptor when `target`
    lies in a run folder this process holds: each folder from the run folder down is opened
    relative to it without following a link, so the rename lands in the folder the session
    started in even if it moved in the instant after `check_folder` (never in what took its
    path; a staging `source` left in that one is then missing there, and the failed rename is
    RunFolderMoved). Elsewhere: a plain os.replace. Both paths must lie in the same run folder
    when one does."""
    for run_dir, fd in _held.items():
        if run_dir not in target.parents:
            continue
        try:
            _replace_below(fd, source.relative_to(run_dir).parts, target.relative_to(run_dir).parts)
        except OSError as err:
            if not _same(fd, run_dir):  # it moved after the check: the rename found nothing to take
                raise RunFolderMoved(run_dir) from err
            raise
        return
    os.replace(source, target)


def _replace_below(fd: int, source: tuple[str, ...], target: tuple[str, ...]) -> None:
    """os.replace of `source` to `target`, both relative to the folder open as `fd`."""
    source_dir = _open_below(fd, source[:-1])
    try:
        target_dir = _open_below(fd, target[:-1])
        try:
            os.replace(source[-1], target[-1], src_dir_fd=source_dir, dst_dir_fd=target_dir)
        finally:
            os.close(target_dir)
    finally:
        os.close(source_dir)


def _open_below(fd: int, parts: tuple[str, ...]) -> int:
    """A new descriptor of the folder `parts` below the folder open as `fd` (no link followed)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    current = os.open(".", flags, dir_fd=fd)
    for part in parts:
        try:
            inner = os.open(part, flags, dir_fd=current)
        finally:
            os.close(current)
        current = inner
    return current
