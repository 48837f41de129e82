"""What takes the space of a studio home (`lorastudio du`; no torch, no HTTP).

A home used for a year holds runs, a gallery, datasets, caches and records that the studio
bounds in different ways (README "Disk use of the studio home"): some have a cap it keeps (the
encode cache's, the thumbnails', the records'), some are the user's to remove (runs, gallery
images, datasets, models). `home_usage` adds up each part's files and bytes, walking with
os.scandir and never following a link below a part (a link counts as itself, not what it
points to), so the user sees which part grew and how to shrink it. The home and each part are
followed where they are links themselves (a home on a larger disk reached by a link,
`outputs` linked to another disk): the studio writes through them. Read-only: safe beside a live server.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from lorastudio.settings import Settings

# (the part's path under the home, what it is and how it shrinks): README "Disk use" says the same
PARTS: tuple[tuple[str, str], ...] = (
    ("outputs", "runs' folders: delete a run on its page or DELETE /api/runs/ID"),
    ("gallery", "generated images: delete them on the Generate page"),
    ("datasets", "dataset folders: `lorastudio datasets delete NAME`"),
    ("models", "fetched or added base models: the Models page's Delete"),
    ("cache/encoded", "encode cache: capped (README's disk cache), `lorastudio cache prune`"),
    ("cache/inductor", "torch.compile's cache: recompiled when removed (no run live)"),
    ("cache/thumbs", "dataset thumbnails: capped at 20,000 files"),
    ("cache/decoded", "decoded-images records of the datasets"),
    ("logs", "runs' logs: 32 MB a run at most, removed with the run"),
    ("lorastudio.db", "the run store: removed with each run"),
)


@dataclass(frozen=True)
class Usage:
    """One part of the home: its path, files, bytes (the blocks the disk holds: a sparse file by
    what it holds, not its apparent size) and what it is."""

    path: Path
    files: int
    bytes: int
    what: str


def home_usage(settings: Settings, unread: list[Path] | None = None) -> list[Usage]:
    """The parts of the home (PARTS, the encode cache where Settings.cache_dir puts it, then the
    rest of the home as "other"), each with its files and bytes, largest first. A part that is not
    there is left out. Hard links inside the home are counted once. A folder that cannot be read
    is not counted and is appended to `unread` (the command names each)."""
    seen: set[tuple[int, int]] = set()
    unread = [] if unread is None else unread
    try:
        os.stat(settings.home)
    except FileNotFoundError:
        return []
    except OSError:  # a link loop, a folder above it not searchable: the home alone is named
        unread.append(settings.home)
        return []
    parts = [(settings.home / name, what) for name, what in PARTS]
    if settings.cache_dir is not None:
        parts[[p for p, _ in parts].index(settings.home / "cache/encoded")] = (
            Path(settings.cache_dir),
            "encode cache (LORASTUDIO_CACHE_DIR): `lorastudio cache prune`",
        )
    counted: set[Path] = set()
    out = []
    for path, what in parts:
        group = [path]
        if path.name == "lorastudio.db":  # SQLite's write-ahead log and its index with it
            group += [path.with_name("lorastudio.db-wal"), path.with_name("lorastudio.db-shm")]
        files = size = 0
        for one in group:
            more = _walk(one, seen, unread)
            files, size = files + more[0], size + more[1]
            counted.add(one)
        if files:
            out.append(Usage(path, files, size, what))
    other = _walk(settings.home, seen, unread, skip=counted)
    if other[0]:
        out.append(
            Usage(settings.home, other[0], other[1], "the rest of the home (records, timings, probes)")
        )
    return sorted(out, key=lambda u: u.bytes, reverse=True)


def largest_entries(folder: Path, count: int, unread: list[Path] | None = None) -> list[Usage]:
    """The `count` largest entries of `folder` (each run folder of outputs/, each dataset), by
    bytes; [] when there is none. A folder that cannot be read is appended to `unread`."""
    unread = [] if unread is None else unread
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    rows = []
    for name in names:
        files, size = _walk(folder / name, set(), unread)
        rows.append(Usage(folder / name, files, size, ""))
    return sorted(rows, key=lambda u: u.bytes, reverse=True)[:count]


def _walk(
    path: Path, seen: set[tuple[int, int]], unread: list[Path], skip: set[Path] | None = None
) -> tuple[int, int]:
    """(files, bytes) under `path` (itself when not a folder), following `path` where it is a
    link (a home or a part the user linked elsewhere: before, a linked home's own files were
    counted as the link, 0 bytes) but no link below it, each (device, inode) once; entries in
    `skip` (and below them) left out; a folder that cannot be listed, and a `path` that cannot
    be stat'ed (a link loop, a folder above it not searchable), appended to `unread`. (0, 0)
    when not there (a dangling link included)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return 0, 0
    except OSError:  # a home given as a link loop was "total: 0 files" and nothing said why
        unread.append(path)
        return 0, 0
    if not stat.S_ISDIR(st.st_mode):
        return _one(st, seen)
    if not _first_visit(st, seen):  # a part inside another one (a link, LORASTUDIO_CACHE_DIR)
        return 0, 0
    files = size = 0
    stack = [path]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:  # one entry at a time: a folder of 1e6 files is not held
                for entry in it:
                    if skip and Path(entry.path) in skip:
                        continue
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(est.st_mode):
                        if _first_visit(est, seen):
                            stack.append(Path(entry.path))
                        continue
                    one = _one(est, seen)
                    files, size = files + one[0], size + one[1]
        except FileNotFoundError:  # gone meanwhile (a run deleted)
            continue
        except OSError:  # unreadable: what it holds is not counted, and the command says so
            unread.append(folder)
            continue
    return files, size


def _first_visit(st: os.stat_result, seen: set[tuple[int, int]]) -> bool:
    """Whether folder `st` is met for the first time (it is then remembered in `seen`): a part
    reached again through a linked part or home is counted once."""
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return False
    seen.add(key)
    return True


def _one(st: os.stat_result, seen: set[tuple[int, int]]) -> tuple[int, int]:
    """(1, its bytes) for a file not counted yet, else (0, 0). Only a file of more than one link
    can be met twice, so only those are remembered in `seen` (every file's (device, inode) held
    ~1 KB a file with the listing: 287 MB for a dataset of 300,000 images; RELIABILITY 1245)."""
    if st.st_nlink > 1 and not _first_visit(st, seen):
        return 0, 0
    return 1, st.st_blocks * 512
