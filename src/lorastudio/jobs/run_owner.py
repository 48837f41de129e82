"""A `lorastudio train` run's proof of life that a reader in any PID namespace of the same kernel
can read: an exclusive flock on `<home>/cache/run-owners/<run id>.lock`, held by the recording
process from before its record is created until its end is recorded.

Why (RELIABILITY 1195): a run records its owner as (pid, processes.start_token), and a reader in
another PID namespace (the next container on the same volume, a reader on the host) cannot tell
that pid from a live one, so a CLI run killed outright (`docker stop` past its grace, the OOM
killer) stayed "running" for it. The kernel drops a flock when its holder dies, whatever the
namespace, so a reader that can take the lock shared knows the owner is gone. Only where the
reader and the owner share a kernel (the same boot id in the owner's start token): another host's
lock may be local to that host (an NFS mount with local locks), and there the rule of
process_gone ("cannot be told") stays. No torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from pathlib import Path

from lorastudio.processes import same_kernel

FOLDER = ("cache", "run-owners")
# a link in a lock's place is never followed, a FIFO never waited on (a reader's open of one
# blocked the server's run listing for ever; RELIABILITY 1249)
_NO_LINK = os.O_NOFOLLOW | os.O_NONBLOCK


def owner_lock_path(home: Path, run_id: str) -> Path:
    """The lock file of run `run_id` in the studio home `home`."""
    return home.joinpath(*FOLDER, f"{run_id}.lock")


def hold_owner_lock(home: Path, run_id: str) -> int | None:
    """Take run `run_id`'s lock exclusively for this process; its descriptor, or None where the
    file cannot be made or locked (the run goes on; a reader then falls back to the pid rule). A
    file it could not lock (held by another process: planted, or a tool's) is removed: left, a
    reader took it for this run's once that holder let go, and settled the live run as dead."""
    path = owner_lock_path(home, run_id)
    # a sweep (`sweep_free_locks`) may look at the file (a shared lock) or remove it between this
    # open and this lock: tried again a few times
    for attempt in range(5):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | _NO_LINK, 0o666)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                return fd
        except FileNotFoundError:  # removed by a sweep meanwhile
            pass
        except BlockingIOError:  # held: a sweep's look, or another process's for good
            if attempt == 4:
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()  # not this run's lock: no reader may judge the run by it
                return None
        except OSError:  # not lockable here
            os.close(fd)
            return None
        os.close(fd)  # removed, held a moment, or another file made there meanwhile: again
        time.sleep(0.01)
    return None


def release_owner_lock(home: Path, run_id: str, fd: int | None) -> None:
    """Remove run `run_id`'s lock file and free the lock (after its end is recorded)."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        owner_lock_path(home, run_id).unlink()
    with contextlib.suppress(OSError):
        os.close(fd)


def owner_gone(home: Path, run_id: str) -> bool:
    """True only where run `run_id`'s lock file is there and no process holds its lock (its owner
    died without recording its end); the file is then removed. False where it is held, absent (a
    run recorded before these locks, or one whose lock could not be made), cannot be read, or is
    no regular file (a link, a FIFO: never opened through, never waited on)."""
    path = owner_lock_path(home, run_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | _NO_LINK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device: no run's lock
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: held by its live owner
        return False
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        path.unlink()
    return True


def cli_owner_gone(home: Path, run_id: str, source: str | None, owner_start: str | None) -> bool:
    """Whether the owner of run `run_id` (its record's source and owner start token) is a CLI run
    that process_gone cannot tell (another PID namespace or host name, the same kernel) and that
    is gone: its lock is free (`owner_gone`, which removes the file)."""
    return source == "cli" and same_kernel(owner_start) and owner_gone(home, run_id)


def sweep_free_locks(home: Path, keep: set[str]) -> None:
    """Remove the lock files whose run is not in `keep` (the store's live runs) and whose lock no
    process holds (RELIABILITY 1251: the owner died and its run was settled by the pid rule, by a
    version before these locks, or deleted; each such file stayed for good). A held one stays
    (a run between taking its lock and recording itself)."""
    try:
        with os.scandir(home.joinpath(*FOLDER)) as listing:
            ids = [e.name[: -len(".lock")] for e in listing if e.name.endswith(".lock")]
    except OSError:
        return
    for run_id in ids:
        if run_id not in keep:
            owner_gone(home, run_id)
