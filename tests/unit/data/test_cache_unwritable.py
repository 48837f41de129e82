"""The encode cache's readers lock on a cache folder the run cannot write into: full (no block
or inode left for the lock file) or an empty read-only mount (the folder itself cannot be made).
A read-only cache with a lock already there was read (session 26); these two failed the run
with CacheError "the on-disk encode cache cannot be used" (RELIABILITY 1072). Now the run holds
no lock and uses no disk cache, as on a read-only one. The errno is injected (CI cannot mount)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lorastudio.data import cache_io
from lorastudio.data.cache_io import READERS_LOCK, hold_readers


def test_a_full_cache_disk_is_used_as_a_read_only_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "encoded"
    real = os.open

    def full(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & os.O_CREAT and os.fsdecode(path).endswith(READERS_LOCK):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(cache_io.os, "open", full)
    assert hold_readers(root) is None  # was CacheError: ".readers.lock: No space left on device"
    assert root.is_dir() and not (root / READERS_LOCK).exists()


def test_an_empty_read_only_cache_mount_is_used_as_a_read_only_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cache" / "encoded"

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert hold_readers(root) is None  # was CacheError: ".readers.lock: No such file or directory"
    assert not root.exists()
