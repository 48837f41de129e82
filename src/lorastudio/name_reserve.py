"""A defaulted output name reserved across threads and processes (no torch).

A run without an output_name is named `<family>-<local date-time>` to the second
(config_resolve.resolve_train_config), made free with `-2`, `-3`, ... past a folder or a live
job that holds it (config_resolve.free_output_name). Two namers in the same second (two
`lorastudio train`, a CLI run beside the server's submit, two API requests) each found the name
free before either made its folder, took the same one, and the second was refused "... already
exists; choose another output_name" by the run folder's claim (training/resume/run_lock.py) for a name
its user never chose.

So a namer holds its name: `reserve_output_name` takes the first free candidate whose
reservation file `outputs/.<name>.reserved` it can lock (created with O_EXCL or, when it is
there, flock'ed without waiting: a live holder's lock refuses, a dead holder's file is taken
over, the kernel having dropped its lock with its process). The run folder itself cannot be the
reservation: a fresh run's claim makes it, and refuses one that exists (a fresh run never
writes into a folder it did not create). The holder keeps the reservation until its run's
folder exists or the run ended (`NameHold.release`, which removes the file). Hidden files in
outputs/ are no run's: the listings and clean-ups skip them. On a file system without flock a
reservation file that is there counts as held (a killed holder's then moves later names on by
one suffix, nothing worse).

A killed holder's file stays until a later namer of that name takes it over, so the places that
sweep the leftovers of outputs/ (a server start, jobs/leftovers.start_leftover_cleanup;
`lorastudio train`'s start, cli/train_cmd._remove_abandoned_runs) also remove the reservation
files no live holder locks (`sweep_stale_reservations`, RELIABILITY 1127): each is locked as a
namer takes it over, then removed under that lock, so a live holder's (another thread's or
process's) is never removed and a namer that opened the file meanwhile finds it gone and makes
its own (`_hold`'s check that the file it locked is still the one named so).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".reserved"
MAX_SUFFIX = 10_000


def reservation_path(outputs_dir: Path, name: str) -> Path:
    """The reservation file of output name `name` in `outputs_dir`."""
    return outputs_dir / f".{name}{SUFFIX}"


@dataclass
class NameHold:
    """One reserved output name; `fd` holds the lock (None: nothing held, e.g. a user's own
    name or every suffix taken)."""

    name: str
    path: Path | None = None
    fd: int | None = None

    def release(self) -> None:
        """Give the name back: remove the reservation file (when it is still this hold's) and
        drop the lock. Safe to call twice."""
        fd, self.fd = self.fd, None
        if fd is None or self.path is None:
            return
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(self.path, follow_symlinks=False)):
                os.unlink(self.path)  # under the lock: a taker checks it locked the file still named so
        os.close(fd)


def _hold(path: Path, create: bool = True) -> int | None:
    """A descriptor locking reservation file `path`, or None when a live holder has it (or it
    cannot be locked or made here; without `create`, when it is not there)."""
    for _ in range(3):  # a file its holder removed between our open and our lock: open it again
        fd, created = None, False
        if create:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
                created = True
            except FileExistsError:  # a holder's, live or killed: opened below
                pass
            except OSError:  # no room, read-only: the run's own checks say so
                return None
        if fd is None:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:  # a link, or removed meanwhile: the next try tells
                continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live holder: another namer (one that took even our new file
            os.close(fd)  # between its creation and our lock, as a killed holder's: it holds it)
            return None
        except OSError:  # no flock on this file system: only a file this call created is ours
            if created:
                return fd
            os.close(fd)
            return None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                return fd
        except OSError:
            pass
        os.close(fd)
    return None


def reserve_output_name(name: str, outputs_dir: Path, taken: Collection[str] = ()) -> NameHold:
    """Reserve `name`, else the first of `name-2`, `name-3`, ... that no folder in
    `outputs_dir`, no name in `taken` (a queued or running job's) and no live reservation of
    another namer (thread or process) holds. Returns the hold (release it once the run's folder
    exists or the run ended). Every suffix taken: `name` unheld, refused later with the reason
    as before (the run folder's claim)."""
    with contextlib.suppress(OSError):
        outputs_dir.mkdir(parents=True, exist_ok=True)
    for n in range(1, MAX_SUFFIX):
        candidate = name if n == 1 else f"{name}-{n}"
        if candidate in taken or os.path.lexists(outputs_dir / candidate):
            continue
        path = reservation_path(outputs_dir, candidate)
        fd = _hold(path)
        if fd is None:
            continue
        hold = NameHold(candidate, path, fd)
        if os.path.lexists(outputs_dir / candidate):  # its run made the folder, then gave it back
            hold.release()
            continue
        return hold
    return NameHold(name)


def sweep_stale_reservations(outputs_dir: Path) -> list[Path]:
    """Remove the reservation files (`.<name>.reserved`, regular files directly in `outputs_dir`)
    that no live holder locks: a killed namer's (the kernel dropped its lock). Each is locked
    without waiting and removed under the lock, as `NameHold.release` does; one a live holder (a thread
    of this process, another process) locks is kept, and so is every one on a file system without
    flock (its holder cannot be told). Returns the removed paths. Never raises for a file that
    went or cannot be read: the next sweep or namer tells."""
    try:
        with os.scandir(outputs_dir) as entries:
            found = [
                Path(e.path)
                for e in entries
                if e.name.startswith(".") and e.name.endswith(SUFFIX) and e.is_file(follow_symlinks=False)
            ]
    except OSError:  # no outputs folder yet, or not one
        return []
    removed: list[Path] = []
    for path in sorted(found):
        fd = _hold(path, create=False)
        if fd is None:  # a live holder's (or gone meanwhile)
            continue
        try:  # under the lock, the file checked to be the one named so (_hold): none but ours
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass  # kept: the next sweep or namer tells
        finally:
            os.close(fd)
    return removed
