"""Open dataset files without following links out of the dataset folder.

A dataset is one flat folder. Its images, captions and metadata.jsonl are opened here, never by
path alone: the folder is opened with O_NOFOLLOW|O_DIRECTORY, the file relative to that folder
(`dir_fd`) with O_NOFOLLOW, and the opened file must be a regular file (fstat). A symbolic link
in the folder, or a folder swapped for a link, is therefore refused at the moment of the read,
not only when it was listed: a check by path followed by an open by path would leave a window in
which a link can be put in place. `folder_identity` records which folder a scan validated
(device, inode); later opens by the training worker pass it and refuse a folder that was
replaced meanwhile.

The standard library has no "open beneath this directory" call, hence this module (Python's
`os.open` with `dir_fd` and the O_NOFOLLOW flag are the POSIX primitives it is built on; the
studio runs on Linux).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from lorastudio.errors import DatasetError
from lorastudio.io_advice import READ_ADVICE

FolderId = tuple[int, int]  # (st_dev, st_ino) of a dataset folder

_NOFOLLOW = os.O_NOFOLLOW
_DIRECTORY = os.O_DIRECTORY
_CLOEXEC = os.O_CLOEXEC
_NONBLOCK = os.O_NONBLOCK  # a FIFO planted in a dataset must not block the open


def _refused(path: Path, reason: str) -> DatasetError:
    return DatasetError(f"cannot read {path.name}", [f"{path.name}: {reason}"])


def open_folder(folder: Path) -> int:
    """An O_RDONLY descriptor of `folder`, refusing a folder that is a symbolic link."""
    try:
        return os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR) and folder.is_symlink():
            raise DatasetError(
                f"dataset folder {folder} is a symbolic link",
                [f"{folder}: is a symbolic link (links are not followed out of the datasets folder)"],
            ) from None
        raise DatasetError(f"cannot open dataset folder {folder}", [f"{folder}: {err.strerror}"]) from None


def folder_identity(folder: Path) -> FolderId:
    """(device, inode) of the dataset folder `folder` itself (a link there is refused).

    Raises: DatasetError when it is a symbolic link, missing or cannot be opened.
    """
    fd = open_folder(folder)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return st.st_dev, st.st_ino


def open_in_folder(path: Path, folder_id: FolderId | None = None) -> BinaryIO:
    """Open the dataset file `path` for binary reading without following any link.

    Takes: `path`, a file directly in its dataset folder; `folder_id`, the folder's identity
    recorded when the dataset was validated (None: not checked).
    Returns: the open file (the caller closes it).
    Raises: DatasetError naming the file when it is a symbolic link, not a regular file, missing
    or unreadable, when its folder is a symbolic link, or when the folder is no longer the one
    `folder_id` names (replaced, or swapped for a link, since it was checked).
    """
    dir_fd = open_folder(path.parent)
    try:
        if folder_id is not None:
            st = os.fstat(dir_fd)
            if (st.st_dev, st.st_ino) != folder_id:
                raise DatasetError(
                    f"dataset folder {path.parent} changed after it was checked",
                    [
                        f"{path.parent}: is no longer the folder that was validated (replaced or "
                        "swapped for a link); refused, start the run again"
                    ],
                )
        try:
            fd = os.open(path.name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise _refused(path, "is a symbolic link (not followed)") from None
            advice = READ_ADVICE.get(err.errno or 0)  # what to do: bare "Permission denied" before
            raise _refused(path, f"{err.strerror or err}" + (f"; {advice}" if advice else "")) from None
    finally:
        os.close(dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refused(path, "not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_not_relinked(given: str, resolved: Path, datasets_root: Path) -> None:
    """Refuse a dataset path inside the datasets folder that now leads through a link.

    The server validates a dataset and hands the worker its link-free absolute path. If that
    folder (or a folder above it inside the datasets root) was swapped for a symbolic link
    afterwards, resolving the path would silently follow it; this check refuses it instead.
    Takes: `given`, the data_dir as configured; `resolved`, what it resolved to;
    `datasets_root`, the studio's datasets folder. Paths outside the datasets folder (a local
    CLI run on any folder) are not concerned.
    Raises: DatasetError naming the folder and where it leads.
    """
    given_path = Path(given)
    if not given_path.is_absolute():
        return
    root = datasets_root.resolve()
    lexical = Path(os.path.normpath(given_path))
    if lexical.is_relative_to(root) and lexical != resolved:
        raise DatasetError(
            f"dataset folder {lexical} leads through a symbolic link",
            [
                f"{lexical}: resolves to {resolved} through a symbolic link inside the datasets "
                f"folder {root}; links there are not followed (replace the link with the folder, "
                "or give the folder's real path)"
            ],
        )
