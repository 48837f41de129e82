"""A studio home on a small tmpfs of its own: a disk that really fills (ENOSPC from the kernel,
for SQLite, torch and the upload code alike). Mounting needs root (or a user namespace with
mount rights); where that is refused the tests that need it are skipped, saying why."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(folder: Path, size_mb: int) -> str | None:
    """Mount a tmpfs of `size_mb` MB on `folder`; returns why not (None: mounted)."""
    if shutil.which("mount") is None:
        return "no mount command"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"mount -t tmpfs refused: {done.stderr.strip() or done.returncode}"
    return None


@contextmanager
def small_disk(folder: Path, size_mb: int) -> Iterator[Path]:
    """`folder` (created) with a tmpfs of `size_mb` MB mounted on it for the block; the test
    is skipped where mounting is not permitted (CI without privileges)."""
    folder.mkdir(parents=True, exist_ok=True)
    why = _mount(folder, size_mb)
    if why is not None:
        pytest.skip(f"a real full disk needs a small tmpfs; {why}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


def fill(folder: Path, name: str = "filler.bin") -> Path:
    """Write a file in `folder` until the disk is full (the kernel's ENOSPC); returns it."""
    path = folder / name
    chunk = b"\0" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    return path
