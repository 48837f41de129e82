"""File-system questions about a path a user typed (a base model, a captioning model, a folder to
add to the catalogue, an assistant LoRA file), answered without raising. No torch.

pathlib's `is_dir` / `is_file` raise OSError for a name over the file system's limits
(ENAMETOOLONG: a component over 255 bytes) and for a folder on the way the server may not
search (EACCES), and `expanduser` raises RuntimeError for `~name` when there is no user `name`
(ValueError where `name` holds a NUL byte):
each was a 500 of the API for a mistyped field. Here such a path is simply not there (and
`~name` stays as typed, a relative name every caller refuses as such), so the caller's own
"not found" answer names it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path


def not_utf8(path: str | Path) -> str | None:
    """Why `path` cannot be held as text, or None when it can: a path of bytes that are not UTF-8
    (a folder named in Latin-1 by an old system; Python holds those bytes as lone surrogates,
    which no config, run record, JSON answer or request can carry: RELIABILITY 1032). Worded
    "<path, bytes escaped> is not UTF-8 text (byte 0xe9 at 12)"."""
    raw = os.fsencode(str(path))
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        shown = raw.decode("utf-8", "backslashreplace")
        return f"{shown} is not UTF-8 text (byte 0x{raw[err.start]:02x} at {err.start})"
    return None


def expand_user(text: str | Path) -> Path:
    """`text` with a leading `~` / `~name` expanded; as typed when it names no user's home or
    cannot be looked up (a NUL byte in `~name`: pwd.getpwnam raises ValueError, which was a 500
    of POST /api/models/added and of a preflight's base_model; RELIABILITY 2011)."""
    path = Path(text)
    try:
        return path.expanduser()
    except (RuntimeError, ValueError):  # "Could not determine home directory.", "embedded null byte"
        return path


def _mode(path: str | Path) -> int | None:
    """The st_mode of `path` (links followed), None when it cannot be stat'ed for any reason."""
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):  # missing, too long, not searchable, a NUL byte in it
        return None


def resolved(path: str | Path) -> Path | None:
    """`path` made absolute with every link followed (Path.resolve), or None when it cannot be:
    a link loop (pathlib raises RuntimeError "Symlink loop"), a NUL byte (ValueError), an
    unsearchable folder on the way. A loop given as a base model was a 500 of the API."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def lexists(path: str | Path) -> bool:
    """Whether anything (a link included, not followed) is at `path`; False when it cannot be told
    (a name over the file system's limit, a NUL byte, a folder on the way not searchable)."""
    try:
        os.lstat(path)
    except (OSError, ValueError):
        return False
    return True


def is_dir(path: str | Path) -> bool:
    """Whether `path` is a folder (links followed); False when it cannot be told."""
    mode = _mode(path)
    return mode is not None and stat.S_ISDIR(mode)


def is_file(path: str | Path) -> bool:
    """Whether `path` is a regular file (links followed); False when it cannot be told."""
    mode = _mode(path)
    return mode is not None and stat.S_ISREG(mode)


def missing_file(path: str | Path, what: str = "") -> str:
    """The message for a file argument that is no regular file: "<what> not found: PATH" when
    nothing is there (or it cannot be told), else what is there instead, so that a folder or a
    named pipe given by mistake is not reported as missing: "<what> PATH is a folder, not a file",
    "<what> PATH is a named pipe, socket or device, not a file". `what` ("LoRA file") may be empty."""
    mode = _mode(path)
    lead = f"{what} " if what else ""
    if mode is None:
        return f"{lead}not found: {path}" if what else f"{path} not found"
    if stat.S_ISDIR(mode):
        return f"{lead}{path} is a folder, not a file"
    return f"{lead}{path} is a named pipe, socket or device, not a file"


MAX_NAME_BYTES = 230  # an output file name's UTF-8 bytes: 255 (ext4 / xfs / btrfs) less the staging affixes


def output_file_problem(
    out: Path, suffixes: tuple[str, ...], overwrite: bool, overwrite_flag: str
) -> str | None:
    """Why a command cannot write the file `out` (staged beside it, then renamed), or None: a
    name over MAX_NAME_BYTES, a suffix not in `suffixes` (lower case, with the dot), a folder, an
    existing file without `overwrite` (the message names `overwrite_flag`), a missing or
    unwritable folder. Never raises (the checks above run before any stat of the long name)."""
    if len(out.name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"the file name is longer than the {MAX_NAME_BYTES} bytes allowed: {out.name[:60]}..."
    if is_dir(out):
        return f"{out} is a folder: name the file to write"
    if out.suffix.lower() not in suffixes:
        return f"{out.name}: name the file {' or '.join(suffixes)}"
    if _mode(out) is not None and not overwrite:
        return f"{out} already exists (pass {overwrite_flag} to replace it)"
    if not is_dir(out.parent):
        return f"the folder {out.parent} does not exist"
    if not os.access(out.parent, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only(out.parent) else "permission denied"
        return f"cannot write in the folder {out.parent} ({why})"
    return None


def _read_only(folder: Path) -> bool:
    """Whether `folder` is on a file system mounted read-only (access(2) refuses a write there
    with EROFS, which os.access reports as a plain False: root too, whose permissions pass)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def publish_file(staged: Path, out: Path, overwrite: bool, overwrite_flag: str) -> str | None:
    """Move the finished file `staged` (beside `out`) to `out`, atomically; without `overwrite`
    only while nothing is there: a file that appeared at `out` since output_file_problem checked
    it (another process writing the same name) is kept, and the reason is returned (`staged` is
    left to the caller to remove). None once published. A file system without hard links gets
    the check and the rename (a window of microseconds instead of the command's run)."""
    if overwrite:
        os.replace(staged, out)
        return None
    try:
        os.link(staged, out)  # fails if anything is at `out`, atomically
    except FileExistsError:
        return f"{out} appeared while it was being written, and is kept (pass {overwrite_flag} to replace it)"
    except OSError:  # no hard links here (some FUSE / network / FAT file systems)
        if lexists(out):
            return f"{out} appeared while it was being written, and is kept (pass {overwrite_flag} to replace it)"
        os.replace(staged, out)
        return None
    staged.unlink()
    return None


def owner_note(path: str | Path) -> str:
    """Why this process may not write `path`, in words, where another user owns it (a container's
    volume made by another uid: `docker run --user 1000` over a folder root made): "(it belongs
    to uid 0 and this process runs as uid 1000: chown it, run as uid 0, or ...)". "" where the
    path is this process's own, is not there (a folder to make in "/" is no volume to chown) or
    cannot be stat'ed."""
    probe = Path(path)
    try:
        owner, me = os.stat(probe).st_uid, os.geteuid()
    except (OSError, ValueError, AttributeError):
        return ""
    if owner == me:
        return ""
    return (
        f" ({probe} belongs to uid {owner} and this process runs as uid {me}: chown it to uid {me},"
        f" run as uid {owner} (docker run --user {owner}), or set LORASTUDIO_HOME to a folder of uid {me})"
    )


# what a home that cannot be made because of a file on its path is, in words (mkdir's errno)
_NOT_A_FOLDER = {
    errno.ENOTDIR: "Not a directory (a folder on the studio home's path is a file)",
    errno.EEXIST: "File exists (a file is where a folder of the studio home goes)",
}


def make_home_folders(folders: Iterable[Path]) -> None:
    """mkdir -p each of the studio home's `folders`. One that cannot be made for want of rights
    or room for a file, or because a file is on its path, raises the OSError with
    LORASTUDIO_HOME (or the folder's owner) named in its words; other errors as they come."""
    for d in folders:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST):
                raise
            what = _NOT_A_FOLDER.get(err.errno or 0, err.strerror)
            why = owner_note(d) or " (set LORASTUDIO_HOME to a writable folder)"
            raise type(err)(err.errno, f"{what}{why}", str(d)) from err
