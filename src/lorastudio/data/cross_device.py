"""Moving a staged file into a dataset folder on another file system (no torch, no HTTP).

An upload stages its files under `datasets/.uploads/` and renames each into the dataset; a
dataset folder that is a mount point of its own (another disk, a container's volume) refuses that
rename with EXDEV ("Invalid cross-device link"), which reached the user as a raw OSError naming
the staging file. `replace_into` renames when it can, else copies the file beside its target (a
hidden staging name, staged_files.staging_path) and renames that within the dataset's file
system: the target still appears whole or not at all. A kill -9 mid-copy leaves that hidden
`.a.png.<pid>-<hex>.tmp` in the dataset (no scan lists it): a server start removes it once its
writer's pid runs no process (`killed_copies`, jobs/leftovers.py; staged_files.py's one rule).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from lorastudio.data.pairs import control_subfolders
from lorastudio.staged_files import TMP, killed_writers_staging, staging_path


def replace_into(source: Path, name: str, dir_fd: int) -> None:
    """Move the file `source` to `name` (relative, "a.png" or "control/a.png") under the folder
    open as `dir_fd`, replacing a file there, atomically for a reader of the folder; across file
    systems by a copy beside the target, then a rename (the source is removed after)."""
    try:
        os.replace(source, name, dst_dir_fd=dir_fd)
        return
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
    staged = staging_path(Path(name)).as_posix()  # ".a.png.<pid>-<hex>.tmp" beside the target
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staged, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged, dir_fd=dir_fd)
        raise
    source.unlink()


def killed_copies(dataset: Path) -> list[Path]:
    """The staging files `replace_into` left in dataset folder `dataset` when its process was
    killed mid-copy: `.NAME.<pid>-<hex>.tmp` (with the id: a user's own hidden `.x.123.tmp` is
    not one) whose pid runs no process, regular files only, in the folder's top level and its
    control folders (data/pairs.control_subfolders: the only places an upload writes). The
    names are read, not stat'ed, so a large dataset costs one directory read per folder."""
    found = killed_writers_staging(dataset, TMP, with_id=True)
    for folder in control_subfolders(dataset):
        if not folder.is_symlink():
            found += killed_writers_staging(folder, TMP, with_id=True)
    return found
