"""Dataset listings (no torch, no HTTP): each dataset folder's image and caption counts.

metadata.jsonl is read once per version of the file (cached by device, inode, size and mtime),
so the listings behind /api/info and /api/datasets do not re-read an unchanged file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from lorastudio.data.captions import read_metadata
from lorastudio.data.dataset_names import name_problem
from lorastudio.data.discovery import DatasetFiles, discover
from lorastudio.data.kohya_listing import kohya_counts, kohya_layout
from lorastudio.data.markup_count import caption_marks
from lorastudio.data.row_names import match_rows
from lorastudio.errors import DatasetError
from lorastudio.file_version import version_of


def dataset_summary(folder: Path) -> dict[str, Any]:
    """{"name", "path", "images", "captions", "markup_captions", "markup_counted", "usable",
    "problem"}: captions
    counts images with a caption a run reads (a .txt that is not blank, else a metadata.jsonl row
    that is not blank: captions.own_caption, matched to its image as the scan matches it, its name
    composed otherwise too: data/row_names.py; an unreadable .txt counts, the preflight names it),
    markup_captions those whose caption a fresh run refuses for another trainer's markup
    (data/markup_count.py, remembered per file version), markup_counted False where it leaves
    out the rows of a metadata.jsonl too large for a listing to read (RELIABILITY 2072). metadata.jsonl is read once per version
    of the file (`_metadata_names`); one that cannot be read counts no rows here (the dataset's
    detail and preflight say why)."""
    return summary_of(folder, discover(folder))


def summary_of(folder: Path, files: DatasetFiles) -> dict[str, Any]:
    """`dataset_summary` of `folder` from its listing `files` (data.discovery.discover), with
    `usable` and `problem`: a folder made by hand under a name the studio cannot look up is
    listed with the reason and the fix (data/dataset_names.name_problem). A kohya layout read in
    place (no top-level image, kohya `N_words` sub-folders only) counts its folders' images and
    their own captions, as a run of its folders reads them (data/kohya_listing.py)."""
    problem = name_problem(folder.parent, folder.name)
    layout = kohya_layout(folder, files)
    if layout is not None:  # kohya N_words folders read in place: counted as a run reads them (2201)
        return {"name": folder.name, "path": str(folder), **kohya_counts(layout), "markup_counted": True,
                "usable": problem is None, "problem": problem}  # fmt: skip
    names = _metadata_names(files.metadata) if files.metadata else frozenset()
    rows = match_rows(dict.fromkeys(names), (p.name for p in files.images)).by_file  # as a run's scan
    marks = caption_marks(folder, files)
    captioned = sum(  # as a run's scan takes a caption (captions.own_caption: a blank .txt is none)
        1
        for p in files.images
        if (p.stem in files.sidecars and p.name not in marks.blank_txt) or p.name in rows
    )
    return {
        "name": folder.name,
        "path": str(folder),
        "images": len(files.images),
        "captions": captioned,
        "markup_captions": marks.markup,
        "markup_counted": not marks.rows_unread,  # a metadata.jsonl over 8 MB: its rows not read (2072)
        "usable": problem is None,
        "problem": problem,
    }


_NAMES_CACHE: dict[tuple[str, int, int, int, int], frozenset[str]] = {}
_NAMES_CACHE_MAX = 64
_NAMES_LOCK = threading.Lock()


def _metadata_names(path: Path) -> frozenset[str]:
    """The file names metadata.jsonl gives a caption (not blank), cached by path and file version
    (file_version.version_of): listings (/api/info, /api/datasets) do not re-read an unchanged file."""
    try:
        st = path.lstat()
    except OSError:
        return frozenset()
    key = (str(path), *version_of(st))
    with _NAMES_LOCK:
        names = _NAMES_CACHE.get(key)
    if names is None:
        try:
            names = frozenset(name for name, text in read_metadata(path).captions.items() if text)
        except DatasetError:
            names = frozenset()
        with _NAMES_LOCK:
            if len(_NAMES_CACHE) >= _NAMES_CACHE_MAX:
                _NAMES_CACHE.pop(next(iter(_NAMES_CACHE)))
            _NAMES_CACHE[key] = names
    return names


def list_datasets(root: Path) -> list[dict[str, Any]]:
    """Summaries of every visible dataset folder under `root`, by name. A symbolic link to a
    folder is listed unusable, naming where it points and why (`link_summary`): it is never
    followed (not even to count its images); it was left out, so a dataset linked in from
    another disk was simply missing from the Datasets page."""
    if not root.is_dir():
        return []
    folders = sorted(p for p in root.iterdir() if not p.name.startswith(".") and p.is_dir())
    out = []
    for folder in folders:
        if folder.is_symlink():
            out.append(link_summary(folder))
            continue
        try:
            out.append(dataset_summary(folder))
        except DatasetError:
            continue  # unreadable folder: not listed
    return out


def link_summary(link: Path) -> dict[str, Any]:
    """The listing of dataset `link`, a symbolic link to a folder: unusable, its problem naming
    the target and what to do (the server reads no dataset through a link: its files could be
    another folder's by the time a run reads them; `lorastudio train` takes a folder by its path)."""
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return {
        "name": link.name,
        "path": str(link),
        "images": 0,
        "captions": 0,
        "markup_captions": 0,
        "markup_counted": True,
        "usable": False,
        "problem": (
            f"a symbolic link to {target}: dataset folders are not read through links; move (or "
            "copy) the folder itself here, or train it from the CLI by its path (data_dir)"
        ),
    }
