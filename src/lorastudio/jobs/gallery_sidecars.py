"""A gallery image's settings sidecar, read once per file version (no torch).

`read_sidecar(path)` answers the sidecar's fields from a memo keyed by the file's path and
version (device, inode, size, mtime_ns, ctime_ns): a listing of an unchanged gallery opens no
sidecar again, and one edited (a new version) or deleted by hand is read again or seen gone on
the next listing. The memo is bounded (MEMO_MAX entries, least recently used go first). Nothing
is followed or waited on: a link, a FIFO or a folder is not opened, one over MAX_SIDECAR_BYTES
not read; each reads as none ({})."""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.capped_read import read_capped

MAX_SIDECAR_BYTES = 2**20  # a sidecar read (ours are a few KB: the prompts are capped)
MEMO_MAX = 20_000  # sidecar versions remembered (a few KB each at most: ~tens of MB worst case)

_Version = tuple[int, int, int, int, int]
_memo: OrderedDict[str, tuple[_Version, dict[str, Any]]] = OrderedDict()
_lock = threading.Lock()


def _version(st: os.stat_result) -> _Version:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_sidecar(path: Path) -> dict[str, Any]:
    """The fields of settings sidecar `path` (a copy: the caller may change it); {} when it is
    missing, unreadable, not a JSON object, over MAX_SIDECAR_BYTES, or not a regular file. Read
    from the file only when this version of it was not read before."""
    key = str(path)
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        _forget(key)
        return {}
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SIDECAR_BYTES:  # a link, a FIFO, huge
        _forget(key)
        return {}
    with _lock:
        hit = _memo.get(key)
        if hit is not None and hit[0] == _version(st):
            _memo.move_to_end(key)
            return dict(hit[1])
    version, meta = _read(path)
    if version is not None:
        with _lock:
            _memo[key] = (version, meta)
            _memo.move_to_end(key)
            while len(_memo) > MEMO_MAX:
                _memo.popitem(last=False)
    return dict(meta)


def _forget(key: str) -> None:
    with _lock:
        _memo.pop(key, None)


def _read(path: Path) -> tuple[_Version | None, dict[str, Any]]:
    """(the version read, its fields): the file is opened without following a link or waiting
    on a FIFO, and its version taken from the open file (what was read is what is memoised);
    (None, {}) when it cannot be opened or is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None, {}
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, {}
        raw = read_capped(fh, MAX_SIDECAR_BYTES + 1)
    try:
        meta = json_read.loads(raw) if len(raw) <= MAX_SIDECAR_BYTES else None
    except ValueError:  # UnicodeDecodeError included
        meta = None
    return _version(st), meta if isinstance(meta, dict) else {}
