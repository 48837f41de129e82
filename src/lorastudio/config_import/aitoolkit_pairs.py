"""ai-toolkit's paired and masked datasets -> our control_dirs / control/ and masks/ folders (no torch).

ai-toolkit pairs a dataset (`folder_path`) with control images of the same file names in
`control_path` (FLUX.1 Kontext, Qwen-Image-Edit; one folder or a list) and its UI's
`control_path_1` .. `control_path_3` (the further references of Qwen-Image-Edit-Plus; read as
`control_path2` .. too), and weighs its loss by a mask of the same name
in `mask_path` (white trained, black weighted `mask_min_value`). Here (config_fields_data.py) a
dataset pairs through its own `control/`, `control_2/` ... sub-folders, or, for a run of one
dataset, through `control_dirs` (parallel folders anywhere); its masks are its `masks/`
sub-folder, black weighted `unmasked_weight`. So a control folder is carried as control_dirs for
one dataset, as nothing at all where it is already the entry's control/ sub-folder, and is not
carried (said, with where to put it) for one of several datasets elsewhere; a mask folder is
carried only where it is the entry's masks/ sub-folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from lorastudio.config_import import values
from lorastudio.config_import.common import carry, folder
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft

_CONTROL_KEY = re.compile(r"control_path(?:_?([1-9]))?$")  # control_path2 and the UI's control_path_1 .. _3


@dataclass
class Pairs:
    """What `read_entry` found of one dataset entry: its folder, its control folders in slot
    order ((peer key, absolute path)), its mask folder, its mask_min_value."""

    n: int
    path: str
    controls: list[tuple[str, str]] = field(default_factory=list)
    masks: tuple[str, str] | None = None
    mask_min: tuple[str, Any] | None = None


def pair_keys(item: dict[str, Any]) -> set[str]:
    """The keys of one ai-toolkit dataset that this module reads."""
    return {k for k in item if _CONTROL_KEY.match(k)} | {"mask_path", "mask_min_value"} & set(item)


def read_entry(draft: Draft, where: str, item: dict[str, Any], n: int, path: str) -> Pairs:
    """The control and mask folders of the dataset `item` at `where` (our entry `n`, folder
    `path`), each placed as `common.folder` places a folder (a '..' part refuses the import)."""
    found = Pairs(n, path)
    slots: list[tuple[int, str, Any]] = []
    for key in sorted(k for k in item if _CONTROL_KEY.match(k)):
        value = item[key]
        slot = int(key[-1]) if key[-1].isdigit() else 1
        if isinstance(value, list):  # one list of folders: slot 1, 2, ...
            slots += [(slot + i, f"{where}.{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            slots.append((slot, f"{where}.{key}", value))
    for _, peer, value in sorted(slots, key=lambda s: s[0]):
        if value is None or value == "":  # the UI's saved job: `control_path: null`
            draft.drop(peer, f"{NOT_NEEDED}: no control folder")
            continue
        placed = folder(draft, peer, value)
        if placed is not None:
            found.controls.append((peer, placed[0]))
    if item.get("mask_path") in (None, ""):  # the UI's saved job: `mask_path: null`
        if "mask_path" in item:
            draft.drop(f"{where}.mask_path", f"{NOT_NEEDED}: no mask folder")
    else:
        placed = folder(draft, f"{where}.mask_path", item["mask_path"])
        if placed is not None:
            found.masks = (f"{where}.mask_path", placed[0])
    if "mask_min_value" in item:
        found.mask_min = (f"{where}.mask_min_value", item["mask_min_value"])
    return found


def _same(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def place_pairs(draft: Draft, entries: list[Pairs], count: int) -> None:
    """Carry every entry's controls and masks (`count`: the run's dataset entries)."""
    for entry in entries:
        _controls(draft, entry, count)
        _masks(draft, entry)


def _controls(draft: Draft, entry: Pairs, count: int) -> None:
    if not entry.controls:
        return
    own = [
        os.path.join(entry.path, "control" if i == 0 else f"control_{i + 1}")
        for i in range(len(entry.controls))
    ]
    if all(_same(path, want) for (_, path), want in zip(entry.controls, own, strict=True)):
        for i, (peer, path) in enumerate(entry.controls):
            sub = "control" if i == 0 else f"control_{i + 1}"
            draft.fold(peer, f"datasets.{entry.n}.path", path, label=f"datasets.{entry.n}.path + {sub}/")
        return
    if count == 1:
        paths = [path for _, path in entry.controls]
        draft.set(entry.controls[0][0], "control_dirs", paths, shown=("control_dirs[0]", paths[0]))
        for i, (peer, path) in enumerate(entry.controls[1:], 1):
            draft.fold(peer, "control_dirs", path, label=f"control_dirs[{i}]")
        return
    for i, (peer, path) in enumerate(entry.controls):
        want = own[i]
        draft.drop(
            peer,
            f"{NOT_SUPPORTED}: control_dirs pair one dataset; with several, each pairs through its own "
            f"control sub-folders: move or link {path} to {want}",
        )


def _masks(draft: Draft, entry: Pairs) -> None:
    carried = False
    if entry.masks is not None:
        peer, path = entry.masks
        want = os.path.join(entry.path, "masks")
        if _same(path, want):
            draft.fold(peer, f"datasets.{entry.n}.path", path, label=f"datasets.{entry.n}.path + masks/")
            carried = True
        else:
            draft.drop(
                peer,
                f"{NOT_SUPPORTED}: a dataset's loss masks are its own masks/ sub-folder (the same file stems): "
                f"move or link {path} to {want}",
            )
    if entry.mask_min is None:
        return
    peer, value = entry.mask_min
    if not carried:
        draft.drop(peer, f"{NOT_NEEDED}: no mask folder is carried")
    elif "unmasked_weight" in draft.settings:
        if draft.settings["unmasked_weight"] != value:
            draft.drop(peer, f"{NOT_SUPPORTED}: unmasked_weight is one setting of the run, set by the first")
        else:
            draft.fold(peer, "unmasked_weight", value)
    else:
        carry(draft, peer, value, "unmasked_weight", values.number)
