"""A fresh run's mark (`.fresh-run` in its run folder): what says that every entry runs write
in the folder is one killed session's (training/resume/run_files.killed_fresh), so a later process may
remove them (jobs/leftovers.py). No torch (the job service and the CLI read it).

A fresh session writes it right after it created and locked its folder (run_lock.claim_run_dir)
and removes it once the folder holds something to keep (`settle`). It is a small JSON object
binding it to that folder and naming the run:

    {"folder": "<the folder's name>", "device": <st_dev>, "inode": <st_ino>, "run": "<run id>" | null}

`read_mark` trusts a mark only when it is what `mark_fresh` wrote for this very folder: a
regular file (not a link, a FIFO, a device), at most MARK_MAX_BYTES, of exactly those keys and
types, whose folder name and (device, inode) are the folder's own. So a mark copied into another
folder (another run's, one outside the outputs root), a folder renamed since its run marked it,
or a mark whose text names anything else (paths, `..`, NUL) is no mark: its folder keeps every
file (only staging goes). The run id lets the process that removes a killed run's files add its
note to that run's record (jobs/killed_notes.py); the record must also have the folder's name
as its output name, so a mark never puts a note on another run's record.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from lorastudio import json_read
from lorastudio.training.resume.folder_guard import check_folder

FRESH_MARK = ".fresh-run"  # a fresh session's folder that holds no checkpoint or LoRA yet
MARK_MAX_BYTES = 4096  # a mark is ~100 bytes; anything larger is not one (never read whole)
_RUN_ID = re.compile(r"^[0-9a-f]{6,64}$")  # jobs: uuid4().hex[:12]
_KEYS = {"folder", "device", "inode", "run"}


@dataclass(frozen=True)
class FreshMark:
    """A mark `read_mark` trusts: the run that wrote it (None: written without an id)."""

    run_id: str | None


def mark_fresh(run_dir: Path, run_id: str | None = None) -> None:
    """Mark `run_dir`, just created (and locked) by a fresh session of run `run_id`, as its:
    until `settle`, a kill of the session leaves a folder whose listed entries are all its own
    (run_files.killed_fresh). A `run_id` that is not one of the store's (hex) is left out."""
    if run_id is not None and not _RUN_ID.match(run_id):
        run_id = None
    folder = os.stat(run_dir, follow_symlinks=False)
    body = json.dumps(
        {"folder": run_dir.name, "device": folder.st_dev, "inode": folder.st_ino, "run": run_id}
    ).encode()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(run_dir / FRESH_MARK, flags, 0o666)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_folder(run_dir)


def settle(run_dir: Path) -> None:
    """Remove a fresh session's mark once `run_dir` holds what a kill must keep (a checkpoint
    after its rename, the run's LoRA after it is written). A folder without the mark: nothing."""
    check_folder(run_dir)  # another's folder at the run's path keeps its mark (folder_guard.py)
    try:
        (run_dir / FRESH_MARK).unlink()
    except FileNotFoundError:
        return
    fsync_folder(run_dir)


def read_mark(run_dir: Path) -> FreshMark | None:
    """The mark of `run_dir` when it is one `mark_fresh` wrote for this folder (see the module
    docstring), else None. Never follows a link, never blocks on a FIFO, reads at most
    MARK_MAX_BYTES + 1 bytes."""
    try:
        folder_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:  # gone, a link, not a folder
        return None
    try:
        folder = os.fstat(folder_fd)
        body = _read_small(folder_fd)
    finally:
        os.close(folder_fd)
    if body is None:
        return None
    try:
        fields = json_read.loads(body.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(fields, dict) or set(fields) != _KEYS:
        return None
    name, device, inode, run_id = (fields[k] for k in ("folder", "device", "inode", "run"))
    if name != run_dir.name or type(device) is not int or type(inode) is not int:
        return None
    if (device, inode) != (folder.st_dev, folder.st_ino):  # copied in, or the folder was renamed
        return None
    if run_id is not None and not (isinstance(run_id, str) and _RUN_ID.match(run_id)):
        return None
    return FreshMark(run_id=run_id)


def _read_small(folder_fd: int) -> bytes | None:
    """The mark's bytes in the folder open as `folder_fd`: None unless it is a regular file of
    at most MARK_MAX_BYTES."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(FRESH_MARK, flags, dir_fd=folder_fd)
    except OSError:  # missing, a link (ELOOP), unreadable
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MARK_MAX_BYTES:
            return None
        with contextlib.suppress(OSError):
            body = os.read(fd, MARK_MAX_BYTES + 1)
            return body if len(body) <= MARK_MAX_BYTES else None
        return None
    finally:
        os.close(fd)


def fsync_folder(folder: Path) -> None:
    """fsync `folder` itself (its entries' names)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
