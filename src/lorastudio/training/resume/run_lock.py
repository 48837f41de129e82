"""A run folder's lock: whether a live session writes it (no torch).

The session that writes a run folder (a fresh run from its claim, a resume from its start: rank
0 of a multi-GPU run) holds an exclusive `flock` on the folder itself until it ends. The kernel
drops it with the process, however the process ends (kill -9, the out-of-memory killer), so
another process can tell a live run's folder from one that a dead run left: `unowned` takes the
lock without waiting, and holds it while the caller removes what the dead run left
(jobs/leftovers.remove_abandoned_runs, for `lorastudio train`: the server start's clean-up runs
under the home's exclusive lock and needs none). A claim that raced such a removal finds its new
folder gone under its lock and makes it again. On a file system that takes no flock on a folder
(some network file systems) a session runs without the lock and no folder there counts as
unowned: nothing is removed.

A run folder that is a mount point (a disk mounted at `outputs/NAME`) cannot be made or replaced,
but it can be written into: a fresh run claims one that holds nothing (`empty_mount_point`: no
entry but an ext file system's own lost+found) as it claims a folder it made, and every write
stays inside it (RELIABILITY 1187).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from lorastudio.errors import ConfigError, FieldProblem, JobActive
from lorastudio.training.resume.folder_guard import drop, hold
from lorastudio.training.resume.fresh_mark import mark_fresh

CLAIM_TRIES = 3  # a fresh folder removed by a concurrent clean-up between its mkdir and its lock
MOUNT_OWN_ENTRIES = frozenset({"lost+found"})  # what a freshly made file system holds at its root


def empty_mount_point(run_dir: Path) -> bool:
    """Whether `run_dir` is a mount point (not a link) that holds nothing but MOUNT_OWN_ENTRIES:
    a fresh run may write into it (module docstring). False when it cannot be listed."""
    try:
        if run_dir.is_symlink() or not os.path.ismount(run_dir):
            return False
        return set(os.listdir(run_dir)) <= MOUNT_OWN_ENTRIES
    except OSError:
        return False


def _open(run_dir: Path) -> int:
    return os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)


def lock_run_dir(run_dir: Path) -> int:
    """Lock the existing `run_dir` for this session; returns the descriptor holding the lock
    (close it to release). Raises JobActive when a live session of another process holds it."""
    fd = _open(run_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JobActive(f"another live run writes {run_dir}; wait for it to end") from None
    except OSError:  # no flock on folders here: the session runs unlocked (see the module docstring)
        pass
    hold(run_dir, fd)  # every write in it checks the folder is still this one (folder_guard.py)
    return fd


def claim_run_dir(run_dir: Path, run_id: str | None = None) -> int:
    """Create a fresh run's output folder, lock it (`lock_run_dir`) and mark it fresh for run
    `run_id` (fresh_mark.mark_fresh: a kill before its first checkpoint or LoRA leaves nothing of
    the run, and the run's record says what went); returns the descriptor. A folder that exists
    (made meanwhile by someone else) is a ConfigError: a fresh run never writes into a folder it
    did not create, but for a mount point that holds nothing (`empty_mount_point`), which it
    writes into once no live session holds it and it is still empty under the lock."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    taken = ConfigError(
        [FieldProblem("output_name", f"{run_dir} already exists; choose another output_name")]
    )
    for _ in range(CLAIM_TRIES):
        try:
            run_dir.mkdir()
        except FileExistsError:
            if not empty_mount_point(run_dir):
                raise taken from None
            return _claim_mount_point(run_dir, run_id, taken)
        fd = _open(run_dir)
        with contextlib.suppress(OSError):  # no flock on folders here: unlocked (module docstring)
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits out a clean-up that took the empty folder meanwhile
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(run_dir, follow_symlinks=False)):
                return _marked(run_dir, fd, run_id)
        os.close(fd)  # removed under the clean-up's lock: make it again
    raise ConfigError([FieldProblem("output_name", f"{run_dir} kept being removed while it was created")])


def _claim_mount_point(run_dir: Path, run_id: str | None, taken: ConfigError) -> int:
    """`claim_run_dir` of an empty mount point: locked without waiting (a live session's is
    `taken`), then still empty under the lock (another claim may have written it meanwhile)."""
    fd = _open(run_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise taken from None
    except OSError:  # no flock on folders here: unlocked (module docstring)
        pass
    try:
        empty = set(os.listdir(fd)) <= MOUNT_OWN_ENTRIES
    except OSError:
        empty = False
    if not empty:
        os.close(fd)
        raise taken
    try:
        return _marked(run_dir, fd, run_id)
    except FileNotFoundError:  # unmounted and removed meanwhile
        os.close(fd)
        raise taken from None


def _marked(run_dir: Path, fd: int, run_id: str | None) -> int:
    """Hold the locked `fd` of `run_dir` and mark the folder fresh for `run_id`; returns `fd`."""
    hold(run_dir, fd)  # every write in it checks the folder is still this one (folder_guard.py)
    try:  # its listed entries are this session's (training/resume/run_files.py)
        mark_fresh(run_dir, run_id)
    except FileNotFoundError:  # removed meanwhile: closed by the caller's loop, and made again
        drop(fd)
        raise
    except BaseException:
        release_run_dir(fd)  # the run fails here: nothing of it stays held
        raise
    return fd


def holds(fd: int | None, run_dir: Path) -> bool:
    """Whether `run_dir` is still the folder this session opened as `fd` (`claim_run_dir`,
    `lock_run_dir`): not renamed away, replaced by another folder or a link, or gone. A session
    removes files in its folder only while this holds (training/loop.py): a folder put in its
    place is another's."""
    if fd is None:
        return False
    try:
        return os.path.samestat(os.fstat(fd), os.stat(run_dir, follow_symlinks=False))
    except OSError:
        return False


def release_run_dir(fd: int | None) -> None:
    """Release a lock from `lock_run_dir` / `claim_run_dir` (None: none held)."""
    if fd is not None:
        drop(fd)
        os.close(fd)


@contextlib.contextmanager
def unowned(run_dir: Path) -> Iterator[bool]:
    """Whether no live session holds `run_dir` (a folder, not a link); while the block runs the
    caller holds its lock (when True), so no session starts writing it meanwhile."""
    try:
        fd = _open(run_dir)
    except OSError:  # gone, a link, not a folder
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (BlockingIOError), or no flock on folders here: never unowned
            yield False
            return
        yield True
    finally:
        os.close(fd)
