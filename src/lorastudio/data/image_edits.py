"""Edits of one image of a dataset (no torch, no HTTP): set its caption, delete it with its
caption, control images and masks. Both hold the dataset's lock (data/writes.py) or write staged."""

from __future__ import annotations

from pathlib import Path

from lorastudio.data.captions import MAX_CAPTION_BYTES
from lorastudio.data.discovery import CAPTION_EXTENSION, is_image_name
from lorastudio.data.masks import masks_of
from lorastudio.data.paths import safe_component
from lorastudio.data.upload_pairs import controls_of
from lorastudio.data.writes import dataset_lock, staged_write
from lorastudio.errors import DatasetError, NoSpaceLeft, NotFound, is_no_space


def write_caption(dataset_dir: Path, image_name: str, caption: str) -> Path | None:
    """Set the .txt caption of image `image_name` (staged, then renamed); an empty caption
    removes the .txt. Returns the caption path (None when removed). Raises NotFound when the
    image does not exist, ConfigError/PathOutsideRoot for a bad name, DatasetError if too long,
    NoSpaceLeft on a full disk."""
    image = existing_image(dataset_dir, image_name)
    target = image.with_suffix(CAPTION_EXTENSION)
    text = caption.strip()
    if not text:
        if target.is_file():
            target.unlink()
        return None
    if len(text.encode("utf-8")) > MAX_CAPTION_BYTES:
        raise DatasetError(
            "caption too long", [f"{image_name}: caption larger than {MAX_CAPTION_BYTES // 1024} KB"]
        )
    try:
        with staged_write(target) as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")
    except OSError as err:
        if is_no_space(err):
            raise NoSpaceLeft(f"the caption of {image_name} could not be written", dataset_dir) from err
        raise
    return target


def delete_image(dataset_dir: Path, image_name: str) -> list[str]:
    """Delete image `image_name`, and its .txt caption, control images (control/ folders) and
    loss masks (masks/) unless another image of the same stem (a.jpg beside a.png) still uses
    them. Returns the deleted file names (controls as "control/a.png", masks as "masks/a.png")."""
    image = existing_image(dataset_dir, image_name)
    with dataset_lock(dataset_dir.parent, dataset_dir.name):
        deleted = [image.name]
        image.unlink()
        caption = image.with_suffix(CAPTION_EXTENSION)
        shared = any(
            p.stem == image.stem and is_image_name(p.name) and p.name != image.name
            for p in dataset_dir.iterdir()
        )
        if not shared and caption.is_file():
            caption.unlink()
            deleted.append(caption.name)
        if not shared:  # its control images and masks would be orphans, which a run refuses
            for other in [*controls_of(dataset_dir, image.stem), *masks_of(dataset_dir, image.stem)]:
                other.unlink()
                deleted.append(other.relative_to(dataset_dir).as_posix())
    return deleted


def existing_image(dataset_dir: Path, image_name: str) -> Path:
    """The path of image `image_name` directly in `dataset_dir` (not a symlink). Raises
    ConfigError/PathOutsideRoot for a bad name, NotFound if it is not an existing image."""
    image_name = safe_component(image_name, field="file name")  # NFC, as uploads store it
    path = dataset_dir / image_name
    if not is_image_name(image_name) or path.is_symlink() or not path.is_file():
        raise NotFound(f"no image {image_name!r} in dataset {dataset_dir.name}")
    return path
