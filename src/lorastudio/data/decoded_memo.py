"""The last decoded-images record read or written, kept in memory while its file is unchanged
(data/decoded.py's DecodedRecord.load and save): an upload of many batches into a large dataset
reads its record once, not once per batch (RELIABILITY 2111). With it, how far its journal
(data/decoded_journal.py) was read: a later load reads only the lines appended since
(RELIABILITY 2210). One record is kept per process."""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lorastudio.data.decoded import FileKey
    from lorastudio.data.decoded_journal import JournalId
    from lorastudio.data.images import ImageInfo

Entries = dict[str, tuple["FileKey", "ImageInfo"]]


@dataclass(frozen=True)
class Kept:
    """A record's entries as of its file `ident` and its journal `journal` (device, inode) read
    up to byte `offset` (journal None: none was read; the entries are the record's alone)."""

    files: Entries
    journal: JournalId | None
    offset: int


_lock = threading.Lock()
_kept: list[tuple[Path, tuple[int, ...], Kept]] = []  # the last one


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


def remembered(path: Path, ident: tuple[int, ...] | None, max_bytes: int) -> Kept | None:
    """What `remember` kept of the record `path` while its file is `ident` (and within
    `max_bytes`, as a read); else None. Its `files` are shared: the caller copies them."""
    with _lock:
        for kept_path, kept_ident, kept in _kept:
            if ident is not None and kept_path == path and kept_ident == ident and ident[2] <= max_bytes:
                return kept
    return None


def remember(path: Path, ident: tuple[int, ...] | None, kept: Kept | None) -> None:
    """Keep `kept` as the record `path` whose file is `ident` (None for either: forget what is
    kept). The caller no longer changes `kept.files`."""
    with _lock:
        _kept[:] = [] if ident is None or kept is None else [(path, ident, kept)]
