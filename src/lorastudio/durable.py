"""Durability of staged writes (no torch): `fsync_path` flushes a file, or a folder's entries, to
the disk. A writer that stages a file and renames it into place fsyncs the file before the rename
(else a power loss can leave the new name on an empty or partial file) and the folder after it
(else the rename itself may be lost): training/resume/checkpoint.py, lora/files.write_lora_file."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (where the platform allows opening folders)."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() and hasattr(os, "O_DIRECTORY") else 0)
    try:
        fd = os.open(path, flags)
    except (IsADirectoryError, PermissionError):  # folders cannot be opened on some systems
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
