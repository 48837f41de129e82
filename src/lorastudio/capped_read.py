"""Reading a file up to a cap without a buffer of the cap's size. No torch.

`fh.read(n)` makes its result buffer of n up front (CPython's BufferedReader and FileIO, and a
TextIOWrapper through them), then shrinks it to what was read: a 200-byte record read with a
64 MB cap asked for 64 MB. Harmless while address space is plentiful; under an address-space
limit (`ulimit -v`, RLIMIT_AS: a shared host's or a container's) a run whose torch already held
most of it died of MemoryError reading its decoded-images record (session 30 environment audit).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, AnyStr

CHUNK = 1 << 20


def read_capped(fh: IO[AnyStr], limit: int) -> AnyStr:
    """At most `limit` units of `fh` from where it is (bytes of a binary file, characters of a
    text one), read CHUNK at a time: memory follows the file's size, not `limit`."""
    parts: list[AnyStr] = []
    left = limit
    while left > 0:
        part = fh.read(min(CHUNK, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return parts[0][:0].join(parts) if parts else fh.read(0)


def read_small_file(path: Path, limit: int) -> bytes | None:
    """The bytes of `path` when it is a regular file of at most `limit` bytes, else None (a link,
    a FIFO, a device or a folder in its place: opened without following a link and without
    blocking; a file over the cap; any OSError). For the studio's small records, which a hand or
    another process may have replaced; never raises OSError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as file:
            data = read_capped(file, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None  # grown past the cap since the fstat
