"""The entries of a folder that another request may remove or move aside meanwhile (a run's output
folder taken aside by its delete while its samples, checkpoints or LoRAs are listed): a folder
gone between a listing's check and its read is listed as empty, never an OSError (a 500 of the
API). No torch."""

from __future__ import annotations

from pathlib import Path


def entries(folder: Path) -> list[Path]:
    """The entries of `folder`; [] when it is not a folder now (none, a file, or gone since the
    caller checked it: a delete or a rename landed meanwhile)."""
    try:
        return list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
