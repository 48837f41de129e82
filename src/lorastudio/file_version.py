"""One key for "this version of this file", for every cache that remembers what a file held.

A file's (device, inode, size, mtime_ns) does not tell its versions apart: a rewrite in place
to the same size with the mtime put back (`cp -p` over an existing file, `rsync --inplace -t`,
os.utime, an unpacked archive) keeps all four. The ctime, which only the kernel sets (on any
write, chmod, rename or utime), does: git's index keys on it for the same reason. Every
per-file memo (decoded images, headers, thumbnails, hashes, checked LoRAs) keys on `version_of`.
"""

from __future__ import annotations

import os

FileVersion = tuple[int, int, int, int, int]  # (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)


def version_of(st: os.stat_result) -> FileVersion:
    """The version key of a file from its stat (take it with follow_symlinks=False where a link
    must not stand for its target)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
