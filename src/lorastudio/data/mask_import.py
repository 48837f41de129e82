"""A folder's masks/ imported with its images (`lorastudio datasets import`; issue 29 part 4).
No torch, no HTTP.

The upload path (data/uploads.py) takes a flat batch of images and captions; a dataset folder
on disk may also hold the loss masks (data/masks.py: masks/<stem>.*, one per image). Each file
of SOURCE/masks is checked before anything is written: an image file (IMAGE_EXTENSIONS), not a
link, that decodes within the server's limits (data.images.probe_image), whose stem is an image
of the dataset (imported or already there), and no other mask of that stem in the dataset. The
good ones are copied, each staged and renamed, into DATASET/masks/ under the dataset's lock;
the others are named with the reason. A mask's size is checked where it is used (the run's scan
names a mask of the wrong size).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from lorastudio.data.discovery import is_image_name
from lorastudio.data.images import probe_image
from lorastudio.data.masks import MASKS_DIR, mask_files
from lorastudio.data.safe_open import open_in_folder
from lorastudio.data.writes import dataset_lock, make_dir, staged_write
from lorastudio.errors import DatasetError


@dataclass
class MaskPlan:
    """The masks of SOURCE/masks to import (`good`: paths) and the refused ones (`refused`:
    ("masks/<file>", reason))."""

    good: list[Path] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


def plan_masks(source: Path, image_stems: Collection[str], dataset: Path, max_pixels: int) -> MaskPlan:
    """Check every entry of `source`/masks (see the module docstring) against the dataset's
    image stems `image_stems` (those imported and those already in `dataset`). An empty plan
    when there is no masks/ folder (or it is a link, refused)."""
    plan = MaskPlan()
    folder = source / MASKS_DIR
    if folder.is_symlink():
        plan.refused.append((f"{MASKS_DIR}/", "a symbolic link: links are not followed"))
        return plan
    if not folder.is_dir():
        return plan
    existing = mask_files(dataset)
    for path in sorted(p for p in folder.iterdir() if not p.name.startswith(".")):
        name, stem = f"{MASKS_DIR}/{path.name}", path.stem
        why = None
        if path.is_symlink():
            why = "a symbolic link: links are not followed"
        elif not path.is_file() or not is_image_name(path.name):
            why = "not an image file"
        elif stem not in image_stems:
            why = f"no image {stem}.* in the dataset"
        elif stem in existing and existing[stem].name != path.name:
            why = f"the dataset has the mask {MASKS_DIR}/{existing[stem].name} for {stem} already"
        else:
            try:
                probe_image(path, max_pixels)
            except DatasetError as err:
                why = "; ".join(p.removeprefix(f"{path.name}: ") for p in err.problems or [str(err)])
        if why is None:
            plan.good.append(path)
        else:
            plan.refused.append((name, why))
    return plan


def copy_masks(plan: MaskPlan, dataset: Path, datasets_root: Path, image_stems: Collection[str]) -> list[str]:
    """Copy the plan's good masks whose image is in the dataset now (`image_stems`) into
    `dataset`/masks/ under the dataset's lock; returns the file names copied."""
    wanted = [p for p in plan.good if p.stem in image_stems]
    if not wanted:
        return []
    target = dataset / MASKS_DIR
    with dataset_lock(datasets_root, dataset.name):
        if target.is_symlink():
            raise DatasetError(f"{target} is a symbolic link", [f"{target}: links are not followed"])
        make_dir(target)
        for path in wanted:
            with open_in_folder(path) as src, staged_write(target / path.name) as tmp, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out)
                out.flush()
                os.fsync(out.fileno())
    return [p.name for p in wanted]
