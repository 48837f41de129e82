"""Safe writes into the datasets root (no torch, no HTTP): the per-dataset lock and staged writes.

`dataset_lock` serialises the edits of one dataset (uploads, caption edits, image deletion,
bulk captions, dataset deletion) with an flock on a hidden lock file per dataset, so concurrent
edits, also from another process, never lose metadata.jsonl rows. `staged_write` writes a file
beside its target and renames it over the target, so a reader sees the old or the new file,
never half of one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCKS_DIR = ".locks"  # hidden folder under the datasets root: one lock file per dataset name


def make_dir(folder: Path) -> None:
    """Create `folder` if missing. A hidden working folder that another thread removes when it
    empties can vanish again at any moment: callers retry their own step on FileNotFoundError
    (Path.mkdir(exist_ok=True) raises FileExistsError when it vanishes between its two checks)."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir(parents=True)


@contextmanager
def dataset_lock(datasets_root: Path, name: str) -> Iterator[None]:
    """Hold the exclusive lock of dataset `name` (a safe component) for the block.

    The lock is an flock on `<datasets_root>/.locks/<name>.lock`: it excludes other threads
    (each open is its own lock holder) and other processes (a CLI import beside the server),
    and the kernel drops it when its holder dies. The holder removes the file (and the folder
    when empty) before it unlocks; a waiter that then gets the lock of a removed file retries.
    """
    folder = datasets_root / LOCKS_DIR
    path = folder / f"{name}.lock"
    while True:
        make_dir(folder)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:  # the folder was removed meanwhile
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = os.fstat(fd)
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # locked a file its holder removed: take the new one
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # other locks live in it
            folder.rmdir()
        os.close(fd)


def staging_name(target: Path) -> Path:
    """A fresh hidden staging name next to `target` (`.<name>.<32 hex>.tmp`: what a server start
    removes as a killed write's, jobs/leftovers.py)."""
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    if len(os.fsencode(tmp.name)) > 255:  # a long name made by hand: the staging name must fit too
        tmp = target.with_name(f".{uuid.uuid4().hex}.tmp")
    return tmp


@contextmanager
def staged_write(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to `target`; on success it replaces `target` atomically,
    on error it is removed."""
    tmp = staging_name(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
