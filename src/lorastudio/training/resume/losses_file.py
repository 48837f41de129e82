"""Whether a resume can write its run folder's losses (training/resume/loss_record.py's LOSSES_FILE) and
folder, asked before it trains: every checkpoint appends to the file and stages in the folder, so a
resume refuses what would fail its first checkpoint (RELIABILITY 1642: a link or not a regular file;
1740: a read-only file or folder) instead of training up to it. The job service's resume check
(jobs/resume.validate_resume) and the engine's restore (LossRecord.restore) both ask. No torch."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lorastudio.training.resume.run_files import LOSSES_FILE


def losses_file_problem(run_dir: Path) -> str | None:
    """Why `run_dir`'s LOSSES_FILE cannot take this session's losses, else None (none there, or a
    regular file): a symbolic link (never followed in a run folder) or not a regular file (a FIFO,
    a folder), or a regular file it cannot write, or a run folder it cannot write (read-only:
    RELIABILITY 1740). The read side: training/resume/loss_record.py."""
    path = run_dir / LOSSES_FILE
    if (why := _unwritable_folder(run_dir)) is not None:
        return why
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"{path} cannot be read ({err.strerror or err})"
    if stat.S_ISLNK(mode):
        kind = "a symbolic link, which lorastudio does not follow in a run folder"
    elif not stat.S_ISREG(mode):
        kind = "not a regular file"
    else:
        return _unwritable_losses(path)
    return (
        f"{path} is {kind}: the run appends its losses there at each checkpoint; put the file itself in "
        f'its place (cp --remove-destination "$(readlink -f {path})" {path}) or remove it, then resume'
    )


def _unwritable_folder(run_dir: Path) -> str | None:
    """Why the run folder `run_dir` cannot take a resume's files (a read-only file system or
    mount, a folder this user may not write), else None (also where it cannot be asked: the
    writes then say). Every checkpoint stages and renames in it (RELIABILITY 1740)."""
    try:
        read_only = bool(os.statvfs(run_dir).f_flag & os.ST_RDONLY)
    except OSError:
        return None
    if not read_only and os.access(run_dir, os.W_OK | os.X_OK):
        return None
    kind = "on a read-only file system or mount" if read_only else "not writable by this user"
    return (
        f"the run folder {run_dir} is {kind}: a resume writes its checkpoints, LoRA snapshots and losses "
        "there; make it writable, then resume"
    )


def _unwritable_losses(path: Path) -> str | None:
    """Why the regular file `path` (a LOSSES_FILE) cannot be opened for writing, else None: a
    read-only file (its mode, another user's), file system or mount there (RELIABILITY 1740: the
    resume trained up to its first checkpoint, whose append then failed). Opened as the appends
    open it (read and write: loss_record.LossRecord.flush reads its head back; no link followed,
    never blocking) and closed at once: nothing in it changes. Write-only, as before, a file this
    user may write but not read (mode 0o200) passed, and the first checkpoint's open failed
    (RELIABILITY 1882)."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC))
    except FileNotFoundError:
        return None  # removed meanwhile: the next checkpoint writes one
    except OSError as err:
        return (
            f"{path} cannot be written ({err.strerror or err}): the run appends its losses there at each "
            f"checkpoint; make it writable (chmod u+w {path}, or a writable disk or mount), then resume"
        )
    return None
