"""Loss masks uploaded into a dataset's masks/ folder (POST /api/datasets/NAME/files with form
fields named `mask`; the UI's "Upload as: loss masks"). No torch, no HTTP.

The same checks as `lorastudio datasets import` gives a source folder's masks/, by the same code
(data/mask_import.py: a safe name stored in NFC, an image file, not a link, that decodes within
the limits, whose stem is an image of the dataset with its size, one mask per stem in the upload
and none other of that stem in the dataset, the dataset's masks/ a real folder): each uploaded
name is checked by the import's `stored_name` (a name sent twice, in any Unicode form, is
refused in every copy), the files are written under it into a hidden staging folder under the
datasets root (`.uploads/<id>/masks/`, removed afterwards and by the server's start-up cleanup),
checked there by `plan_masks` as a source folder, and the good ones copied in (each staged and
renamed, under the dataset's lock). Masks go in an upload of their own, after their images.
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from lorastudio.data.mask_import import copy_masks, dataset_images, plan_masks, stored_name
from lorastudio.data.masks import MASKS_DIR
from lorastudio.data.uploads import STAGING_DIR, UploadResult
from lorastudio.data.writes import copy_stream, make_dir
from lorastudio.errors import DatasetError, writing

MASK_FIELD = "mask"  # the multipart field name of a loss mask


def upload_masks(
    datasets_root: Path,
    dataset: Path,
    files: Sequence[tuple[str, BinaryIO]],
    max_pixels: int,
    *,
    strict: bool = False,
) -> UploadResult:
    """Store the uploaded masks (file name, stream) of `dataset` in its masks/ folder. Returns the
    stored names ("masks/<file>") and the refused ones with the reason. Raises DatasetError
    listing every problem when nothing can be stored, or (`strict`) when any mask is refused;
    nothing is written then."""
    if not dataset.is_dir() or not dataset_images(dataset):
        raise DatasetError(
            f"upload to {dataset.name} refused",
            [f"{dataset.name} has no images yet: upload the images first, then their masks"],
        )
    named = [(name, *stored_name(name), stream) for name, stream in files]  # the import's name check
    sent = Counter(safe for _, safe, _, _ in named if safe is not None)
    staging = datasets_root / STAGING_DIR / uuid.uuid4().hex
    folder = staging / MASKS_DIR
    refused: list[tuple[str, str]] = []
    try:
        make_dir(folder)
        for name, safe, why, stream in named:
            if safe is None:
                refused.append((f"{MASKS_DIR}/{name}", why))
            elif sent[safe] > 1:  # as the import refuses two masks of one stem: neither is guessed
                refused.append(
                    (f"{MASKS_DIR}/{safe}", f"sent {sent[safe]} times in one upload (which one?): send one")
                )
            else:
                with (
                    writing(
                        f"{safe} of the mask upload to {dataset.name} could not be stored",
                        dataset,
                        show_file=False,
                    ),
                    open(folder / safe, "wb") as out,
                ):  # a failed read of the upload is ReadFailed
                    copy_stream(stream, out, f"the uploaded file {name}")
        images = dataset_images(dataset)
        plan = plan_masks(staging, images, dataset, max_pixels)
        refused = sorted(refused + plan.refused)
        if not plan.good or (strict and refused):
            problems = [f"{name}: {why}" for name, why in refused] or ["no files in the upload"]
            raise DatasetError(f"upload to {dataset.name} refused", problems)
        stored = copy_masks(plan, dataset, datasets_root, set(images))
        return UploadResult(stored=[f"{MASKS_DIR}/{n}" for n in stored], refused=refused)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
