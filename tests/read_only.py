"""A file made read-only for a block, as the kernel refuses its writes: `chmod a-w` for a user
other than root (root writes through a file's mode), a read-only bind mount of the file itself
for root (EROFS; skipped where mounting is refused). The file's mode is put back after."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """`path` (an existing regular file or folder) not writable for this process during the block."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield path
        finally:
            path.chmod(mode)
        return
    if shutil.which("mount") is None:
        pytest.skip("a read-only file for root needs a read-only bind mount: no mount command")
    bound = subprocess.run(
        ["mount", "--bind", str(path), str(path)], capture_output=True, text=True, check=False
    )
    if bound.returncode != 0:
        pytest.skip(f"a read-only file for root needs a bind mount: {bound.stderr.strip()}")
    try:
        done = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            pytest.skip(f"a read-only bind mount was refused: {done.stderr.strip()}")
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True, check=False)
