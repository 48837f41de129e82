"""GET /api/loras a page at a time (session 35 kpfix4): which run folders of the outputs root
hold a LoRA, in the list's order, filtered by name and family, cut at a cursor.

Only what the order and the filters need is read for every folder: its entry, one stat of its
<name>.safetensors, and with `family` its small <name>.json sidecar; the page's own LoRAs are then
read in full by the route (their final files and validation marks, api/routes/loras.py). The
order is the one the list always had: the runs' output names by the run store's order of their
newest run (RunStore.output_order: its output_places, which deleting a run record never lowers),
then the folders no run recorded by the file's mtime, newest first; the name breaks ties
(hand-copied folders of one mtime).

A cursor is the sort key of a page's last LoRA, "r<place>:<name>" (a recorded one) or
"m<mtime_ns>:<name>", so a LoRA deleted or made between two pages neither repeats nor makes
one skipped; a LoRA trained again meanwhile moves to the top (shown by asking the first page
again). A LoRA whose newest run record is deleted between two pages while its folder stays
(DELETE /api/runs/{id} with keep_files, or an older run sharing the folder) keeps its place:
before session 36 (RELIABILITY 1342) it moved down and was listed again on a later page.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

from lorastudio import json_read
from lorastudio.folder_entries import entries

CURSOR = r"^[rm][0-9]{1,20}:[^/\x00]{1,255}$"  # a page's next_cursor (see the module's docstring)
_CURSOR = re.compile(CURSOR)
_NONE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP}  # Path.is_file's "no such file" answers


@dataclass(frozen=True)
class Found:
    """A run folder with a LoRA: its key in the list's order and what was read to find it."""

    key: tuple[int, int, str]  # (recorded 1 / by mtime 0, rowid or mtime_ns, name): newest = largest
    folder: Path
    stat_size: int
    mtime: float
    sidecar: dict[str, Any] | None


def cursor_of(key: tuple[int, int, str]) -> str:
    """The next_cursor of a page ending on the LoRA of `key`."""
    return f"{'r' if key[0] else 'm'}{key[1]}:{key[2]}"


def parse_cursor(cursor: str) -> tuple[int, int, str]:
    """The key a cursor stands for; ValueError naming `cursor` for any other text (the route's
    query pattern answers 400 before)."""
    if not _CURSOR.match(cursor):
        raise ValueError(f"cursor: {cursor!r} is not a page's next_cursor")
    head, _, name = cursor.partition(":")
    return (1 if head[0] == "r" else 0, int(head[1:]), name)


def find_loras(
    root: Path,
    order: dict[str, int],
    *,
    family: str | None = None,
    query: str | None = None,
    names: list[str] | None = None,
) -> list[Found]:
    """Every <name>/<name>.safetensors of `root` (dot-folders skipped), newest first, whose name
    holds `query` (case-insensitive) and is one of `names` (when given), and whose sidecar's
    family is `family` (when given; a LoRA without a readable sidecar has none). `order`: the
    run store's output_order."""
    wanted = set(names) if names else None
    needle = query.casefold() if query else None
    found = []
    for folder in entries(root):
        name = folder.name
        if name.startswith(".") or (wanted is not None and name not in wanted):
            continue
        if needle is not None and needle not in name.casefold():
            continue
        try:  # one stat: a folder without its LoRA (a run that has not ended) is not listed
            stat = (folder / f"{name}.safetensors").stat()
        except OSError as exc:  # as Path.is_file: only "there is none" is skipped
            if exc.errno in _NONE:
                continue
            raise
        if not S_ISREG(stat.st_mode):
            continue
        sidecar = read_sidecar(folder / f"{name}.json") if family is not None else None
        if family is not None and (sidecar or {}).get("family") != family:
            continue
        key = (1, order[name], name) if name in order else (0, max(stat.st_mtime_ns, 0), name)
        found.append(Found(key, folder, stat.st_size, stat.st_mtime, sidecar))
    found.sort(key=lambda f: f.key, reverse=True)
    return found


def page_of(found: list[Found], limit: int, cursor: str | None) -> tuple[list[Found], str | None]:
    """(the page, its next_cursor): at most `limit` of `found` (newest first) after `cursor`;
    the cursor is None after the last page."""
    after = found if cursor is None else [f for f in found if f.key < parse_cursor(cursor)]
    page = after[:limit]
    return page, cursor_of(page[-1].key) if len(after) > limit else None


def read_sidecar(path: Path) -> dict[str, Any] | None:
    """A LoRA's <name>.json: its dict, or None where missing, unreadable or not a JSON object."""
    try:
        data = json_read.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
