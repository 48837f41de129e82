"""The last decoded-images record read or written, kept in memory while its file is unchanged
(data/decoded.py's DecodedRecord.load and save): an upload of many batches into a large dataset
reads its record once, not once per batch (RELIABILITY 2111). One record is kept per process."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lorastudio.data.decoded import FileKey
    from lorastudio.data.images import ImageInfo

_lock = threading.Lock()
_kept: list[tuple[Path, tuple[int, ...], dict[str, tuple[FileKey, ImageInfo]]]] = []  # the last one


def file_identity(path: Path) -> tuple[int, ...] | None:
    """(device, inode, size, mtime_ns, ctime_ns) of the regular file `path` (no link followed);
    None for anything else or when it cannot be read."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def remembered(
    path: Path, ident: tuple[int, ...] | None, max_bytes: int
) -> dict[str, tuple[FileKey, ImageInfo]] | None:
    """The entries of the record `path` kept by `remember` while its file is `ident` (and within
    `max_bytes`, as a read); else None."""
    with _lock:
        for kept_path, kept_ident, files in _kept:
            if ident is not None and kept_path == path and kept_ident == ident and ident[2] <= max_bytes:
                return files
    return None


def remember(path: Path, ident: tuple[int, ...] | None, files: dict[str, tuple[FileKey, ImageInfo]]) -> None:
    """Keep `files` as the record `path` whose file is `ident` (None: forget what is kept)."""
    with _lock:
        _kept[:] = [] if ident is None else [(path, ident, files)]
