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
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from lorastudio import json_read
from lorastudio.errors import reading
from lorastudio.file_modes import follow_umask_fd

LOCKS_DIR = ".locks"  # hidden folder under the datasets root: one lock file per dataset name
RENAMES_JOURNAL = ".renames.journal"  # in a dataset folder: renames its lock's killed holder left


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
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except FileNotFoundError:  # the folder was removed meanwhile
            continue
        follow_umask_fd(fd)  # an older version's lock (file_modes.py)
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
        finish_renames(datasets_root / name)  # what a killed holder journaled (bulk caption edits)
        yield
    finally:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # other locks live in it
            folder.rmdir()
        os.close(fd)


def journaled_renames(folder: Path, renames: dict[Path, Path]) -> None:
    """Rename each staged file of `renames` ({staged: target}, all directly in `folder` or in one
    of its sub-folders, a kohya layout's `10_sks/`: RELIABILITY 2201; all written) onto its target, as one step for a kill: the pairs are journaled first
    (RENAMES_JOURNAL, staged and renamed), so a holder of the dataset's lock killed between two
    renames leaves the journal, and the next holder (`dataset_lock`, a server start) finishes them
    (`finish_renames`) before anything else reads or writes the folder. The caller holds the lock."""
    journal = folder / RENAMES_JOURNAL
    with staged_write(journal) as tmp:
        tmp.write_text(
            json.dumps([[_in(folder, s), _in(folder, t)] for s, t in renames.items()]), encoding="utf-8"
        )
    for staged, target in renames.items():
        os.replace(staged, target)
    journal.unlink()


def finish_renames(folder: Path) -> bool:
    """Finish the renames a killed holder of `folder`'s lock journaled (`journaled_renames`):
    each staged file still there is renamed onto its target, then the journal goes. Returns
    whether there was a journal. A journal that is not one (unreadable, a path other than a name or
    `sub/name` in a visible sub-folder that is no link) is removed and nothing renamed. Raises OSError when the folder refuses the renames."""
    journal = folder / RENAMES_JOURNAL
    try:
        pairs = json_read.loads(journal.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        pairs = None
    if isinstance(pairs, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(n, str) and _journaled(folder, n) for n in p)
        for p in pairs
    ):
        for staged, target in pairs:
            with contextlib.suppress(FileNotFoundError):  # renamed before the kill
                os.replace(folder / staged, folder / target)
    journal.unlink(missing_ok=True)
    return True


def _in(folder: Path, path: Path) -> str:
    """`path`'s place in `folder` as a journal names it: its name, or `sub/name` in a sub-folder."""
    return path.relative_to(folder).as_posix()


def _journaled(folder: Path, name: str) -> bool:
    """Whether a journal's `name` is one `journaled_renames` writes: a name, or `sub/name` whose
    `sub` is a visible sub-folder of `folder` (not a link: a journal never renames out of it)."""
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or len(parts) > 2:
        return False
    return len(parts) == 1 or (
        not parts[0].startswith(".") and (folder / parts[0]).is_dir() and not (folder / parts[0]).is_symlink()
    )


def finish_journaled_renames(datasets_root: Path) -> list[tuple[str, OSError | None]]:
    """Finish, under each dataset's lock, the renames a writer killed between them journaled in
    its folder (`finish_renames`, which taking the lock runs): a server start's first step, before
    the staging files are removed as leftovers. Returns (dataset name, the OSError that stopped
    it or None) for each dataset that had a journal (a read-only one: its next writer finishes)."""
    done: list[tuple[str, OSError | None]] = []
    for folder in sorted(datasets_root.iterdir()) if datasets_root.is_dir() else []:
        if folder.name.startswith(".") or not (folder / RENAMES_JOURNAL).is_file():
            continue
        try:
            with dataset_lock(datasets_root, folder.name):
                pass
            done.append((folder.name, None))
        except OSError as err:
            done.append((folder.name, err))
    return done


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


COPY_CHUNK = 1 << 20  # bytes a copy reads at a time


def copy_stream(source: BinaryIO, out: BinaryIO, what: str, chunk: int = COPY_CHUNK) -> None:
    """Copy `source` to its end into `out`. A read of `source` that fails is ReadFailed naming
    `what` ("the source file /x/a.png", errors.reading); a write into `out` that fails is the
    OSError, for the caller's `errors.writing` naming its target: an upload's or an import's
    read error of its source (EIO) is never told as a failed write into the dataset."""
    while True:
        with reading(f"{what} could not be read"):
            data = source.read(chunk)
        if not data:
            return
        out.write(data)
