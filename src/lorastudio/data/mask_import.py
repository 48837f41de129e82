"""A folder's masks/ imported with its images (`lorastudio datasets import`; issue 29 part 4).
No torch, no HTTP.

The upload path (data/uploads.py) takes a flat batch of images and captions; a dataset folder
on disk may also hold the loss masks (data/masks.py: masks/<stem>.*, one per image). Each file
of SOURCE/masks is checked before anything is written (`plan_masks`): a safe name
(`stored_name`: data.paths.safe_component, stored under its NFC form, as the upload stores its
image), an image file (IMAGE_EXTENSIONS), not a link, that decodes within the server's limits
(data.images.probe_image), whose stem is an image of the dataset (imported or already there;
stems compared in NFC) of the same size (after EXIF orientation, as the run's scan compares
them: a mask of another size would make the dataset untrainable), the only one of its stem in
SOURCE/masks, and no other mask of that stem in the dataset; a dataset whose masks/ is a link or
a file refuses every mask. The good ones are copied, each staged and renamed, into
DATASET/masks/ under the dataset's lock; the others are named with the reason. The API's mask
upload (data/mask_upload.py) stages its files as such a source folder and runs these checks.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lorastudio.data.discovery import is_image_name
from lorastudio.data.images import probe_image
from lorastudio.data.masks import MASKS_DIR, mask_files
from lorastudio.data.paths import nfc, safe_component
from lorastudio.data.safe_open import open_in_folder
from lorastudio.data.writes import copy_stream, dataset_lock, make_dir, staged_write
from lorastudio.errors import ConfigError, DatasetError, PathOutsideRoot, writing
from lorastudio.folder_entries import never_read


@dataclass
class MaskPlan:
    """The masks of SOURCE/masks to import (`good`: (path, the name it is stored under)) and the
    refused ones (`refused`: ("masks/<file>", reason))."""

    good: list[tuple[Path, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


def dataset_images(folder: Path) -> dict[str, Path]:
    """{stem (NFC): file} of the images of dataset `folder` (none when it does not exist yet)."""
    from lorastudio.data.discovery import discover

    return {nfc(p.stem): p for p in discover(folder).images} if folder.is_dir() else {}


def plan_masks(source: Path, images: Mapping[str, Path], dataset: Path, max_pixels: int) -> MaskPlan:
    """Check every entry of `source`/masks (see the module docstring) against the dataset's
    images `images` ({stem: image file}: those imported and those already in `dataset`; stems
    compared in NFC). An empty plan when there is no masks/ folder (or it is a link, refused; or
    the dataset's masks/ is a link or a file: every mask refused, before anything is written)."""
    plan = MaskPlan()
    folder = source / MASKS_DIR
    if folder.is_symlink():
        plan.refused.append((f"{MASKS_DIR}/", "a symbolic link: links are not followed"))
        return plan
    if not folder.is_dir():
        return plan
    target = dataset / MASKS_DIR
    if target.is_symlink() or (os.path.lexists(target) and not target.is_dir()):
        kind = "a symbolic link" if target.is_symlink() else "not a folder"
        plan.refused.append((f"{MASKS_DIR}/", f"{target} is {kind}: no mask is imported"))
        return plan
    by_stem = {nfc(s): p for s, p in images.items()}
    existing = mask_files(dataset)  # keyed by stem in NFC
    entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    named = {p: stored_name(p.name) for p in entries}
    per_stem = Counter(
        Path(n).stem
        for p, (n, _) in named.items()
        if n and is_image_name(n) and not p.is_symlink() and p.is_file()
    )
    for path in entries:
        name, (stored, bad_name) = f"{MASKS_DIR}/{path.name}", named[path]
        stem = Path(stored).stem if stored else ""
        why = None
        if path.is_symlink():
            why = "a symbolic link: links are not followed"
        elif stored is None:
            why = bad_name
        elif (never := never_read(path)) is not None:  # a pipe was "not an image file"
            why = never
        elif not is_image_name(stored):
            why = "not an image file"
        elif stem not in by_stem:
            why = f"no image {stem}.* in the dataset"
        elif per_stem[stem] > 1:
            why = f"{per_stem[stem]} masks for the image {stem}.* in {MASKS_DIR}/ (which one?): keep one"
        elif stem in existing and existing[stem].name != stored:
            why = f"the dataset has the mask {MASKS_DIR}/{existing[stem].name} for {stem} already"
        else:
            try:
                mask = probe_image(path, max_pixels, colour=False, full=True)
            except DatasetError as err:
                why = "; ".join(p.removeprefix(f"{path.name}: ") for p in err.problems or [str(err)])
            else:
                why = _size_problem(mask.width, mask.height, by_stem[stem], max_pixels)
        if why is None:
            plan.good.append((path, stored))
        else:
            plan.refused.append((name, why))
    return plan


def stored_name(name: str) -> tuple[str | None, str]:
    """The name a mask file `name` is stored under (NFC), or None and why it is not a safe name
    (the one name check of imported and uploaded masks)."""
    try:
        return safe_component(name, field="file name"), ""
    except ConfigError as err:
        return None, "; ".join(f"{p.field}: {p.message}" for p in err.problems)
    except PathOutsideRoot as err:
        return None, str(err)


def _size_problem(width: int, height: int, image: Path, max_pixels: int) -> str | None:
    """Why a mask of width x height does not fit `image` (None when it does, or when the image
    itself cannot be read: the image is refused then, and its mask with it)."""
    try:
        info = probe_image(image, max_pixels)
    except DatasetError:
        return None
    if (width, height) == (info.width, info.height):
        return None
    from lorastudio.data.masks import turned_mask_hint

    return (
        f"{width}x{height}, but {image.name} is {info.width}x{info.height} (a mask must have its image's size)"
        + turned_mask_hint(image, None, (info.width, info.height), (width, height))
    )


def copy_masks(
    plan: MaskPlan,
    dataset: Path,
    datasets_root: Path,
    image_stems: Collection[str],
    shown: Path | None = None,
) -> list[str]:
    """Copy the plan's good masks whose image is in the dataset now (`image_stems`) into
    `dataset`/masks/ under the dataset's lock (stems compared in NFC); returns the file names
    copied. A read of a mask that fails is ReadFailed naming it; a write WriteFailed /
    NoSpaceLeft naming the dataset (`shown`: its path where `dataset` is a staging folder)."""
    stems = {nfc(s) for s in image_stems}
    wanted = [(p, n) for p, n in plan.good if Path(n).stem in stems]
    if not wanted:
        return []
    target = dataset / MASKS_DIR
    with dataset_lock(datasets_root, dataset.name):
        if target.is_symlink():
            raise DatasetError(f"{target} is a symbolic link", [f"{target}: links are not followed"])
        make_dir(target)
        for path, name in wanted:
            with (
                open_in_folder(path) as src,
                writing(
                    f"the mask {name} of {(shown or dataset).name} could not be written", shown or dataset
                ),
                staged_write(target / name) as tmp,
                open(tmp, "wb") as out,
            ):
                copy_stream(src, out, f"the source file {path}")
                out.flush()
                os.fsync(out.fileno())
    return [n for _, n in wanted]
