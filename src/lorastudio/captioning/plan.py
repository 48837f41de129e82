"""Which images of a dataset a caption job captions, and where each caption goes (no torch).

An image counts as captioned when it has a non-blank `<stem>.txt` or metadata.jsonl row (a
sidecar that cannot be read also counts: it is not clobbered unless `overwrite`), or a kohya
`<stem>.caption` at the plan (kept, and named: a plain dataset's run does not read it). A
dataset's top-level images are captioned (never control/ or masks/). A dataset with none there
whose visible sub-folders are all kohya `N_words` folders (the layout a run reads in place with
kohya_folders: data/kohya.kohya_entries) is captioned in place (RELIABILITY 2053): each
folder's images, captions beside them, read as such a run reads them (every `.txt` /
`.caption` of the stem, any case, compared: data/kohya_captions.kohya_caption). There an image's
one caption file is the one rewritten (a `.caption` too: a `.txt` written beside it would be a
second caption, and two that disagree make the run skip the image), and an image with two or
more is refused (named: the run compares them, the job would have to write each). Any other
dataset without top-level images is refused, naming its kohya sub-folders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lorastudio.data.captions import read_metadata, read_sidecar
from lorastudio.data.discovery import discover
from lorastudio.data.kohya import is_kohya_folder
from lorastudio.data.kohya_listing import kohya_sub_folders
from lorastudio.data.row_names import match_rows
from lorastudio.errors import DatasetError

CaptionStore = Literal["txt", "metadata"]
KOHYA_CAPTION_SUFFIX = ".caption"  # kohya's default caption extension: a plain dataset's run does not read it


@dataclass(frozen=True)
class CaptionPlan:
    """todo: images to caption (by name order; a kohya layout: folder by folder); skipped: names
    of images that keep their caption; store: where new captions go; kohya_kept: the skipped
    images whose caption is a kohya `<stem>.caption` (a plain dataset's run does not read it:
    RELIABILITY 1944). A kohya layout captioned in place (`in_place`): names are
    "<folder>/<image>", `targets` the caption file to write of an image that has one, and
    `refused` the reason of each image of `todo` that is not captioned (several caption files)."""

    todo: list[Path]
    skipped: list[str]
    store: CaptionStore
    kohya_kept: list[str] = field(default_factory=list)
    in_place: bool = False
    targets: dict[Path, Path] = field(default_factory=dict)
    refused: dict[Path, str] = field(default_factory=dict)

    def label(self, image: Path) -> str:
        """The name of `image` in events and summaries ("10_sks/a.png" in a kohya layout)."""
        return f"{image.parent.name}/{image.name}" if self.in_place else image.name


def plan_captions(folder: Path, overwrite: bool) -> CaptionPlan:
    """The images of dataset `folder` to caption (all of them with `overwrite`); of images that
    share a stem (a.jpg, a.png: one a.txt is the caption of both, as a run reads it) the first by
    name only, the others skipped, when captions go to .txt files. Without `overwrite`, an image
    whose only caption is a non-blank kohya `<stem>.caption` keeps it (the user's text, not
    shadowed by a model's .txt; the run's preflight names it as not read: rename it to .txt).
    A kohya layout (no top-level image, kohya sub-folders only) is planned in place (the module
    docstring). Raises DatasetError when the folder is missing or cannot be listed / its
    metadata.jsonl read, or holds no image at its top level and is no kohya layout (its kohya
    `N_words` sub-folders holding images are named, not silently left)."""
    files = discover(folder)
    if not files.images:
        in_place = _plan_kohya_in_place(folder, overwrite)
        if in_place is None:
            raise DatasetError(f"dataset {folder.name} has no images to caption", _no_images(folder))
        return in_place
    rows = read_metadata(files.metadata).captions if files.metadata is not None else {}
    rows = match_rows(rows, (p.name for p in files.images)).by_file  # as the scan (data/row_names.py)
    store: CaptionStore = "metadata" if files.metadata is not None and not files.sidecars else "txt"
    kohya = _kohya_captions(folder, files.dropped)
    todo, skipped, kohya_kept = [], [], []
    planned: set[str] = set()  # stems whose .txt this run writes
    for image in files.images:
        if not overwrite and has_caption(image, files.sidecars.get(image.stem), rows):
            skipped.append(image.name)
        elif not overwrite and has_caption(image, kohya.get(image.stem), {}):
            skipped.append(image.name)
            kohya_kept.append(image.name)
        elif store == "txt" and image.stem in planned:  # a.jpg and a.png read one a.txt (data.scan)
            skipped.append(image.name)  # captioned once, by the first; a second caption replaced it
        else:
            todo.append(image)
            planned.add(image.stem)
    return CaptionPlan(todo, skipped, store, kohya_kept)


def _plan_kohya_in_place(folder: Path, overwrite: bool) -> CaptionPlan | None:
    """The plan of a kohya layout read in place (the module docstring), None when `folder` is
    none or none of its folders holds an image."""
    subs = kohya_sub_folders(folder)
    if subs is None:
        return None
    todo: list[Path] = []
    skipped: list[str] = []
    targets: dict[Path, Path] = {}
    refused: dict[Path, str] = {}
    for sub in subs:
        files = discover(sub, kohya=True)
        planned: set[str] = set()  # a.jpg and a.png of one folder read one a.txt
        for image in files.images:
            captions = files.caption_files.get(image.stem, ())
            captioned = not overwrite and any(has_caption(image, path, {}) for path in captions)
            if captioned or image.stem in planned:  # kept; or a.jpg beside a.png, captioned once
                skipped.append(f"{sub.name}/{image.name}")
            else:
                todo.append(image)
                planned.add(image.stem)
                if len(captions) == 1:
                    targets[image] = captions[0]
                elif captions:
                    names = " and ".join(path.name for path in captions)
                    refused[image] = (
                        f"{names}: a run of a kohya folder reads each (they must agree); not captioned, "
                        "keep one of them and caption again"
                    )
    if not todo and not skipped:
        return None
    return CaptionPlan(todo, skipped, "txt", in_place=True, targets=targets, refused=refused)


def _kohya_captions(folder: Path, dropped: list[tuple[str, str]]) -> dict[str, Path]:
    """stem -> its kohya `.caption` file (any case; the first by name) among the entries the
    listing did not use."""
    found: dict[str, Path] = {}
    for name, _why in sorted(dropped):
        path = Path(name)
        if path.suffix.lower() == KOHYA_CAPTION_SUFFIX and not name.startswith("."):
            found.setdefault(path.stem, folder / name)
    return found


def _no_images(folder: Path) -> list[str]:
    """Why `folder` has nothing to caption: its kohya `N_words` sub-folders holding images are
    named with the other sub-folders beside them (a kohya layout is captioned in place only when
    it has no other), else the images it looks for."""
    try:
        subs = sorted(e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
    except OSError:
        subs = []
    kohya = [name for name in subs if is_kohya_folder(name) and discover(folder / name).images]
    if kohya:
        others = [name for name in subs if not is_kohya_folder(name) and not name.startswith(".")]
        beside = ", ".join(others[:10]) or "a link"
        return [
            f"{folder.name}/{name}: a kohya folder beside other sub-folders ({beside}), which a run reading "
            "the layout in place refuses too: move those out to caption it in place, or import it with "
            "`lorastudio datasets import --kohya` to caption it as a dataset"
            for name in kohya[:10]
        ]
    return [
        f"{folder}: no png/jpg/jpeg/webp files at its top level (sub-folders such as control/ and masks/ are never captioned)"
    ]


def has_caption(image: Path, sidecar: Path | None, rows: dict[str, str]) -> bool:
    """Whether `image` has a caption: a non-blank row of `rows`, or `sidecar` non-blank (one
    that cannot be read counts: it is kept as it is)."""
    if rows.get(image.name):
        return True
    if sidecar is None:
        return False
    try:
        return read_sidecar(sidecar) is not None
    except DatasetError:
        return True  # unreadable: kept as it is
