"""The gallery of generated images (`<home>/gallery`): listing and deleting (no torch).

Each image is `<stamp>-<seed>-<id>.png` with its settings sidecar `<stem>.json` (written by
jobs/generation.py: the sidecar first, the image last). Nothing here follows a link: a linked
image is not listed or deleted, a linked sidecar not read or deleted; a sidecar that is not a
regular file (a FIFO would block) or over MAX_SIDECAR_BYTES is read as none."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.data.paths import safe_component
from lorastudio.errors import NotFound
from lorastudio.settings import Settings

MAX_SIDECAR_BYTES = 2**20  # a sidecar read (ours are a few KB: the prompts are capped)


def gallery_dir(settings: Settings) -> Path:
    return settings.home / "gallery"


def gallery_images(settings: Settings) -> list[dict[str, Any]]:
    """The gallery's PNGs, newest first, each with its sidecar's fields (prompt, seed, loras,
    ...; absent when the sidecar is missing or unreadable) and "created" (mtime). Regular files
    only; one deleted while the listing is made is left out."""
    folder = gallery_dir(settings)
    if not folder.is_dir():
        return []
    images = []
    for png in folder.glob("*.png"):
        if png.name.startswith("."):
            continue
        meta = _sidecar(png.with_suffix(".json"))
        try:  # a PNG deleted since the glob (DELETE, a user's rm) is no longer listed, never a 500
            st = os.stat(png, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):  # a link (not followed), a folder named *.png
            continue
        images.append({**meta, "file": png.name, "created": st.st_mtime})
    images.sort(key=lambda item: (item["created"], item["file"]), reverse=True)
    return images


def _sidecar(path: Path) -> dict[str, Any]:
    """The fields of settings sidecar `path`; {} when it is missing, unreadable, not a JSON
    object, over MAX_SIDECAR_BYTES, or not a regular file (a link is not followed, a FIFO not
    waited on: opened without following or blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        raw = fh.read(MAX_SIDECAR_BYTES + 1)
    try:
        meta = json_read.loads(raw) if len(raw) <= MAX_SIDECAR_BYTES else None
    except ValueError:  # UnicodeDecodeError included
        return {}
    return meta if isinstance(meta, dict) else {}


def delete_gallery_image(settings: Settings, file: str) -> list[str]:
    """Delete gallery image `file` (a PNG directly in the gallery, not hidden, not a link) and its
    settings sidecar (<stem>.json); the uploaded references stay (other images may name them).
    Returns the deleted names. Raises ConfigError/PathOutsideRoot for a name with a path,
    NotFound when there is no such image.

    The image goes out of sight first, renamed to its staging name `.<file>.partial` (the name a
    generation writes it under), then the sidecar goes, then the staged image: a kill -9 between
    two steps leaves what a server start removes (jobs/leftovers.py: a `.partial`, and a sidecar
    beside its image's `.partial`), never an orphan sidecar it keeps as a user's."""
    safe_component(file, field="file")
    png = gallery_dir(settings) / file
    if png.suffix != ".png" or file.startswith(".") or png.is_symlink() or not png.is_file():
        raise NotFound(f"no gallery image {file!r}")
    aside = png.with_name(f".{png.name}.partial")
    try:
        os.rename(png, aside)
    except FileNotFoundError:  # another DELETE (or a user's rm) took it since the check
        raise NotFound(f"no gallery image {file!r}") from None
    deleted = [png.name]
    sidecar = png.with_suffix(".json")
    if sidecar.is_file() and not sidecar.is_symlink():
        with contextlib.suppress(FileNotFoundError):  # a racing DELETE of the same image took it
            sidecar.unlink()
            deleted.append(sidecar.name)
    aside.unlink(missing_ok=True)
    return deleted
