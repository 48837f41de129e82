"""Write a folder atomically: fill a hidden sibling staging folder, then rename it into place.

A crash or an error while filling leaves no half-written target (the staging folder is removed
on errors; after a hard kill only a hidden `.NAME.staging-*` sibling can remain).
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path


def is_empty_dir(path: Path) -> bool:
    """True if `path` is an existing directory with nothing in it."""
    return path.is_dir() and not any(path.iterdir())


def publish_dir(target: Path, fill: Callable[[Path], None], is_complete: Callable[[Path], bool]) -> bool:
    """Create `target` by calling `fill(staging)` on an empty sibling folder, then renaming it.

    Takes: `target` (must not exist, or be an empty folder), `fill` (writes the content), and
    `is_complete` (whether a folder already holds the wanted content; used when another process
    published `target` first). Returns True if this call published it, False if another
    process had. Raises whatever `fill` raises (after removing the staging folder),
    FileExistsError only if `target` appeared meanwhile holding something else, and other
    OSErrors if the parent folder cannot be created or written.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as err:  # a file where a parent folder should be
        raise NotADirectoryError(f"{target.parent} is not a folder") from err
    staging = target.parent / f".{target.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()  # unlike tempfile.mkdtemp, honours the umask (the folder is published as is)
    try:
        fill(staging)
        if is_empty_dir(target):
            target.rmdir()
        try:
            os.rename(staging, target)  # atomic on one filesystem; fails if target is non-empty
        except OSError as err:
            if not target.exists():
                raise
            if is_complete(target):  # another process published the same content first
                return False
            raise FileExistsError(f"{target} appeared while it was being written") from err
        return True
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def publish_once(
    out: Path,
    fill: Callable[[Path], None],
    holds: Callable[[Path], bool],
    error: Callable[[str], Exception],
    *,
    what: str,
    refusal: str,
) -> Path:
    """Publish `out` with publish_dir unless it already holds the content (idempotent); returns `out`.

    `holds(folder)` says whether a folder holds the wanted content, `what` names it in messages
    ("the sample dataset"). Raises `error(refusal)` when `out` exists and holds anything else
    (it is never overwritten), and `error` naming `what` when another writer published something
    else meanwhile or `out` cannot be written (nothing half-written is left).
    """
    if holds(out):
        return out
    if out.exists() and not is_empty_dir(out):
        raise error(refusal)
    mounted = (
        f"cannot write {what} to {out}: it is a mount point, which the folder written beside it cannot"
        f" replace; write it into a folder inside the mount (e.g. {out / 'model'})"
    )
    if not out.is_symlink() and os.path.ismount(out):  # its staging sibling is renamed onto it: EBUSY
        raise error(mounted)
    try:
        publish_dir(out, fill, holds)
    except FileExistsError as err:
        raise error(f"{out} was created by someone else while {what} was written") from err
    except OSError as err:
        if err.errno == errno.EBUSY:  # a mount point os.path.ismount does not see (a bind mount of a folder)
            raise error(mounted) from err
        raise error(f"cannot write {what} to {out}: {err}") from err
    return out
