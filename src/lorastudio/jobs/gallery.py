"""The gallery of generated images (`<home>/gallery`): listing and deleting (no torch).

Each image is `<n>_<stamp>-<seed>-<id>.png` with its settings sidecar `<stem>.json` (written by
jobs/generation.py: the sidecar first, the image last). `<n>` numbers the gallery's images in the
order the studio made them (`new_image_name`): the listing's order, never the files' mtimes (a
clock set back an hour would list the next images below the last hour's). Images made before
the numbering (`<stamp>-<seed>-<id>.png`) or put there by hand (not `<digits>_...`) list below
every numbered one, by mtime among themselves. Nothing here follows a link: a linked image is
not listed or deleted, a linked sidecar not read or deleted; a sidecar that is not a
regular file (a FIFO would block) or over MAX_SIDECAR_BYTES is read as none. The listing is
paged (gallery_page) and reads each sidecar once per file version (gallery_sidecars)."""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import stat
import threading
import uuid
from pathlib import Path
from typing import Any

from lorastudio.data.paths import safe_component
from lorastudio.errors import ConfigError, NotFound
from lorastudio.jobs.gallery_sidecars import MAX_SIDECAR_BYTES, read_sidecar
from lorastudio.settings import Settings

__all__ = ["MAX_SIDECAR_BYTES", "delete_gallery_image", "gallery_dir", "gallery_page", "new_image_name"]


def gallery_dir(settings: Settings) -> Path:
    return settings.home / "gallery"


CURSOR_PATTERN = r"^[0-9]{1,20}:[^/\\\x00]{1,255}$"  # "<order>:<file>" of a page's last image
NUMBERED = 10**19  # a numbered image's order is NUMBERED + n: above every mtime_ns (< 10**19 until 2286)
_NUMBER = re.compile(r"^([0-9]{1,18})_")  # a numbered image's name: `<n>_...`
_numbers_lock = threading.Lock()
_last_numbers: dict[Path, int] = {}  # gallery folder -> the last number this process gave


def new_image_name(settings: Settings, seed: int) -> str:
    """The name of the next image of the gallery: `<n>_<stamp>-<seed>-<id>.png`, `n` one more
    than both the highest number in the gallery and the last this process gave (two requests in
    flight get two numbers, in the order they asked). The server alone writes the gallery (it
    owns the home), so no other process numbers images meanwhile. The stamp (local wall clock)
    is for the eye only; the order is `n`'s."""
    folder = gallery_dir(settings)
    with _numbers_lock:
        highest = max((_order(name, 0) - NUMBERED for _key, name in _pngs(folder)), default=0)
        n = max(highest, _last_numbers.get(folder, 0)) + 1
        _last_numbers[folder] = n
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{n:06d}_{stamp}-{seed}-{uuid.uuid4().hex[:8]}.png"


def _order(name: str, mtime_ns: int) -> int:
    """An image's place in the listing (higher: newer): NUMBERED + n for a numbered name, its
    mtime_ns for another (made before the numbering, or by hand)."""
    numbered = _NUMBER.match(name)
    return NUMBERED + int(numbered.group(1)) if numbered else mtime_ns


def gallery_page(settings: Settings, limit: int, cursor: str | None = None) -> dict[str, Any]:
    """A page of the gallery's PNGs, newest first (by `_order`: the studio's numbers, then
    unnumbered images by mtime_ns; then file name; all descending): {"images": at most `limit`, each with its sidecar's fields (prompt, seed,
    loras, ...; absent when the sidecar is missing or unreadable) and "created" (mtime);
    "total": the images in the gallery; "next_cursor": give it as `cursor` for the next page,
    None after the last}. `cursor` (a page's next_cursor) starts the page after that page's last
    image, so an image made meanwhile (newer than every listed one) is neither repeated nor
    makes one skipped, and a deleted one does not move the boundary.

    Only the page's sidecars are read, each once per file version (gallery_sidecars). Regular
    files only (a link or a folder named *.png is left out); one deleted while the listing is
    made is left out (`total` may still count it)."""
    after = _cursor_key(cursor) if cursor else None
    folder = gallery_dir(settings)
    entries = _pngs(folder)
    entries.sort(reverse=True)
    rest = entries if after is None else [e for e in entries if e < after]
    page = rest[:limit]
    images = []
    for _key, name in page:
        path = folder / name
        meta = read_sidecar(path.with_suffix(".json"))
        try:  # one deleted while its sidecar was read is left out
            mtime = os.stat(path, follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue
        images.append({**meta, "file": name, "created": mtime})
    more = len(rest) > limit
    return {
        "images": images,
        "total": len(entries),
        "next_cursor": f"{page[-1][0]}:{page[-1][1]}" if more else None,
    }


def _cursor_key(cursor: str) -> tuple[int, str]:
    """(order, file) of a cursor "<order>:<file>"; ConfigError for another shape (the
    route's pattern refuses those first)."""
    ns, sep, name = cursor.partition(":")
    if not (sep and ns.isdigit() and name):
        raise ConfigError(f"not a gallery cursor: {cursor!r} (give a page's next_cursor)")
    return int(ns), name


def _pngs(folder: Path) -> list[tuple[int, str]]:
    """(`_order`, name) of each regular, not hidden *.png directly in `folder` (never following
    a link); [] when there is no such folder. A numbered image's order is its name's, so its
    kind is read from the folder's entry (no stat where the file system gives the entry's type);
    only an unnumbered image is stat'ed, for its mtime: at 20,000 images, a stat and a Path each
    took 0.25 CPU s a page and a generation's name (RELIABILITY 1225)."""
    found = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                name = entry.name
                if name.startswith(".") or not name.endswith(".png"):
                    continue
                try:  # a PNG deleted since the scan (DELETE, a user's rm) is not listed, never a 500
                    if _NUMBER.match(name):
                        if entry.is_file(follow_symlinks=False):  # not a link, a folder named *.png
                            found.append((_order(name, 0), name))
                        continue
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.append((_order(name, st.st_mtime_ns), name))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return found


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
