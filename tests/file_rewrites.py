"""A file rewritten in place with its times put back (what `cp -p`, `rsync --inplace -t` or
os.utime leave): same inode, size and mtime, new contents. The per-file memos must see it
(lorastudio/file_version.py: the ctime is in every key)."""

from __future__ import annotations

import os
from pathlib import Path


def rewrite_keeping_mtime(path: Path, data: bytes) -> None:
    """Write `data` (of the file's size) over `path` in place, then put its times back; asserts
    that inode, size and mtime are what they were."""
    before = path.stat()
    assert len(data) == before.st_size
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
