"""The entries of a folder that another request may remove or move aside meanwhile (a run's output
folder taken aside by its delete while its samples, checkpoints or LoRAs are listed): a folder
gone between a listing's check and its read is listed as empty, never an OSError (a 500 of the
API). And why an import never reads an entry (`never_read`: a link, a sub-folder, a pipe). No
torch."""

from __future__ import annotations

from pathlib import Path


def entries(folder: Path) -> list[Path]:
    """The entries of `folder`; [] when it is not a folder now (none, a file, or gone since the
    caller checked it: a delete or a rename landed meanwhile)."""
    try:
        return list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def never_read(path: Path) -> str | None:
    """Why an import never reads the folder entry `path`, named for what it is (a symbolic link,
    never followed; a sub-folder; a named pipe, socket or device), or None for a regular file.
    A pipe was "a link or a folder (not followed)" in the kohya and control imports
    (RELIABILITY 2100)."""
    if path.is_symlink():
        return "a symbolic link (not followed)"
    if path.is_dir():
        return "a sub-folder (not imported)"
    if not path.is_file():
        return "not a regular file: a named pipe, socket or device is never read"
    return None
