"""Loss masks of a dataset (TrainConfig.alpha_mask / unmasked_weight, issue 29 part 4). No torch.

Where a mask comes from: a grey image in the dataset's `masks/` sub-folder with the image's file
stem (any supported image type, one per stem; white = the pixel is trained fully, black = it gets
`unmasked_weight`, grey in between; an RGB one read by its luma; one with an alpha channel, its
grey times its opacity: a transparent pixel is black, images.mask_grey), or, with `alpha_mask`,
the image's own alpha channel (opaque = trained). A mask must have its image's size (after EXIF orientation); an image without one
trains unmasked and is named by the preflight. `attach_masks` checks and attaches them to a scan
(its fingerprint then covers the masks' bytes too); `mask_crop` gives one crop's mask on the
latent grid, cut exactly like the image (data/crop.py: the same resize, crop and flip), then
box-averaged down by the VAE's scale factor.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from lorastudio.data.crop import cover_crop, resized_size
from lorastudio.data.decode_checks import check_images
from lorastudio.data.decode_progress import DecodeProgress
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.decoded import DecodedRecord
from lorastudio.data.discovery import is_image_name
from lorastudio.data.images import (
    DECODE_ERRORS,
    eight_bit,
    has_transparency,
    mask_grey,
    open_image,
)
from lorastudio.data.items import DatasetScan, ImageItem, MaskRef, item_name
from lorastudio.data.orientation import ORIENTATION_FIX, exif_orientation
from lorastudio.data.paths import nfc, stem_key
from lorastudio.data.safe_open import FolderId, folder_identity
from lorastudio.errors import ConfigError, DatasetError, FieldProblem

MASKS_DIR = "masks"
MASK_FIELDS = ("alpha_mask", "unmasked_weight")  # the config fields the mask checks may refuse


def _mask_names(root: Path) -> list[str]:
    """The sorted image file names of `root`/masks/ (links and other entries skipped; [] when
    there is no masks/ folder)."""
    folder = root / MASKS_DIR
    if folder.is_symlink() or not folder.is_dir():
        return []
    try:
        with os.scandir(folder) as it:
            return sorted(
                e.name
                for e in it
                if not e.name.startswith(".") and e.is_file(follow_symlinks=False) and is_image_name(e.name)
            )
    except (FileNotFoundError, NotADirectoryError):  # removed (or replaced) since the check above
        return []


def mask_files(root: Path) -> dict[str, Path]:
    """stem (NFC: paths.stem_key) -> mask file of `root`/masks/ (image files only; links and other
    entries skipped; {} when there is no masks/ folder): look an image up by stem_key(its name).
    A stem with several masks (a.png and a.webp, or one name in NFC and NFD) maps to the last by
    name: `mask_clashes` names them, and a run refuses them."""
    return mask_index(root)[0]


def mask_index(root: Path) -> tuple[dict[str, Path], dict[str, list[str]]]:
    """(`mask_files`, `mask_clashes`) of `root` from ONE listing of masks/: every clash's stem is
    a key of the first, even while masks come and go (two listings could disagree: a clash of a
    stem the first listing did not have)."""
    names = _mask_names(root)
    by_stem: dict[str, list[str]] = {}
    for name in names:
        by_stem.setdefault(stem_key(name), []).append(name)
    files = {stem: root / MASKS_DIR / found[-1] for stem, found in by_stem.items()}
    return files, {stem: found for stem, found in by_stem.items() if len(found) > 1}


def masks_of(root: Path, stem: str) -> list[Path]:
    """Every mask file of image stem `stem` in `root`/masks/ (regular image files, not links; a
    clash may give several; stems compared in NFC): what goes with the image when it is deleted."""
    return [root / MASKS_DIR / name for name in _mask_names(root) if stem_key(name) == nfc(stem)]


def mask_clashes(root: Path) -> dict[str, list[str]]:
    """stem (NFC) -> the names of `root`/masks/ files of that stem, for the stems with several
    (which one is the image's mask? neither is guessed)."""
    return mask_index(root)[1]


def clash_problem(stem: str, names: Sequence[str]) -> str:
    """The problem naming the several masks `names` of the image(s) `stem`.*."""
    listed = ", ".join(f"{MASKS_DIR}/{n}" for n in names)
    return f"{listed}: {len(names)} masks for the image {stem}.* (which one?): keep one"


def image_has_alpha(img: Image.Image) -> bool:
    """Whether the opened (header-only) image has an alpha channel (or a palette's transparency, or
    a PNG colour key: images.has_transparency): what alpha_mask reads."""
    return has_transparency(img)


def has_alpha(item: ImageItem) -> bool:
    """Whether the image has an alpha channel (read from its header)."""
    with open_image(item.path, item.folder_id) as img:
        return image_has_alpha(img)


def file_has_alpha(path: Path) -> bool:
    """Whether the image file `path` has an alpha channel, as Pillow opens it (its header; a JPEG
    never has one); False when it cannot be read. (The dataset listing reads the flag with the
    size, `image_headers.header_info`, and asks this only where the header cannot tell.)"""
    if path.suffix.lower() in (".jpg", ".jpeg"):
        return False
    try:
        with open_image(path) as img:
            return image_has_alpha(img)
    except DatasetError:
        return False


def attach_masks(
    scan: DatasetScan,
    *,
    alpha_mask: bool,
    max_pixels: int = 64_000_000,
    decode_pixels: int = DEFAULT_DECODE_PIXELS,
    decoded_dir: Path | None = None,
    decode_budget_s: float | None = None,
    progress: DecodeProgress | None = None,
) -> DatasetScan:
    """`scan` (one folder) with each item's MaskRef (see the module docstring) and a fingerprint
    that covers the masks. Unchanged when there is no masks/ folder and alpha_mask is off.
    `decoded_dir`, `decode_budget_s`: as scan_dataset's: a mask the folder's decoded record
    (data/decoded.py, keyed `masks/<name>`) does not list as it is now is decoded fully within
    the budget and recorded when it passes (None: header check only); `progress`, the run's
    count of those decodes and its stop check (data/decode_progress.py).
    Raises: ConfigError for alpha_mask with a masks/ folder too (which one?); DatasetError naming
    every mask that cannot be used (undecodable, another size than its image, no image of its
    stem, several masks of one image's stem). Whether anything of the run is masked at all is
    `masked_setting_problems`' question, asked of the joined entries (one entry without masks is
    fine when another has them)."""
    files, clashes = mask_index(Path(scan.root))
    if alpha_mask and files:
        raise ConfigError(
            [FieldProblem("alpha_mask", f"{scan.root}/{MASKS_DIR} holds masks too: use one or the other")]
        )
    items, problems = (
        _alpha_items(scan.items)
        if alpha_mask
        else _folder_items(
            scan, files, clashes, max_pixels, decode_pixels, decoded_dir, decode_budget_s, progress
        )
    )
    if problems:
        raise DatasetError(f"masks of {scan.root} cannot be used ({len(problems)} problem(s))", problems)
    if not files and not alpha_mask:
        return scan
    dropped = [(name, why) for name, why in scan.dropped if name != MASKS_DIR]
    return replace(scan, items=items, dropped=dropped, fingerprint=_fingerprint(scan.fingerprint, items))


def masked_setting_problems(
    scan: DatasetScan, alpha_mask: bool, unmasked_weight: float
) -> list[FieldProblem]:
    """The mask settings that would mean nothing for the run's dataset `scan` (every entry
    joined, masks attached): `alpha_mask` when no image has an alpha channel, `unmasked_weight`
    when no image has a mask. Empty when some image of some entry is masked."""
    if any(it.mask is not None for it in scan.items):
        return []
    roots = [str(e.root) for e in scan.entries] or [str(scan.root)]
    problems = []
    if alpha_mask:
        where = roots[0] if len(roots) == 1 else f"any of {', '.join(roots)}"
        problems.append(
            FieldProblem("alpha_mask", f"no image of {where} has an alpha channel (nothing would be masked)")
        )
    if unmasked_weight != 0:
        if alpha_mask:
            source = "no image has an alpha channel"
        elif len(roots) == 1:
            source = f"{roots[0]} has no {MASKS_DIR}/ folder"
        else:
            source = f"none of {', '.join(roots)} has a {MASKS_DIR}/ folder"
        problems.append(FieldProblem("unmasked_weight", f"nothing is masked ({source})"))
    return problems


def _folder_items(
    scan: DatasetScan,
    files: dict[str, Path],
    clashes: dict[str, list[str]],
    max_pixels: int,
    decode_pixels: int,
    decoded_dir: Path | None,
    decode_budget_s: float | None,
    progress: DecodeProgress | None = None,
) -> tuple[list[ImageItem], list[str]]:
    """The items with their masks/ files (`files`, `clashes`: one mask_index), and every problem
    with those files (each mask fully decoded once: `decoded_dir`, `decode_budget_s`, `progress` as
    attach_masks')."""
    from lorastudio.data.scan import file_sha256

    if not files:
        return list(scan.items), []
    folder_id = folder_identity(Path(scan.root) / MASKS_DIR)
    stems = {stem_key(it.path.name) for it in scan.items}
    problems = [
        f"{MASKS_DIR}/{path.name}: no image named {stem}.* in the dataset"
        for stem, path in files.items()
        if stem not in stems
    ]
    problems += [clash_problem(stem, names) for stem, names in clashes.items() if stem in stems]
    record = None
    if decoded_dir is not None:
        root = Path(scan.root)
        record = DecodedRecord.load(decoded_dir, root, folder_identity(root), decode_budget_s, progress)
    masked = [files[stem_key(it.path.name)] for it in scan.items if stem_key(it.path.name) in files]
    try:
        if record is not None:
            record.expect(masked)
        stems_masked = [stem_key(it.path.name) for it in scan.items if stem_key(it.path.name) in files]
        answers = check_images(
            [(files[stem], folder_id) for stem in stems_masked],
            max_pixels,
            decode_pixels,
            record,
            colour=False,
        )
        checked = dict(zip(stems_masked, answers, strict=True))
    finally:
        if record is not None:
            record.save()
    items = []
    for item in scan.items:
        path = files.get(stem_key(item.path.name))
        if path is None:
            items.append(item)
            continue
        info, decoded = checked[stem_key(item.path.name)]
        if isinstance(info, DatasetError):
            problems += [f"{MASKS_DIR}/{p}" for p in info.problems]
            continue
        if (info.width, info.height) != (item.width, item.height):
            problems.append(
                f"{MASKS_DIR}/{path.name}: {info.width}x{info.height}, but {item.path.name} is "
                f"{item.width}x{item.height} (a mask must have its image's size)"
                + turned_mask_hint(
                    item.path, item.folder_id, (item.width, item.height), (info.width, info.height)
                )
            )
            continue
        mask = MaskRef(path, folder_id, sha256=file_sha256(path, folder_id), decoded=decoded)
        items.append(replace(item, mask=mask))
    return items, problems


def turned_mask_hint(
    image: Path, folder_id: FolderId | None, upright: tuple[int, int], mask: tuple[int, int]
) -> str:
    """A size mismatch's hint when the mask (width, height) has the STORED size of `image`, whose
    `upright` size is that turned by its EXIF orientation (a mask made from the stored pixels, as
    a script reading the file with Pillow without exif_transpose makes it: RELIABILITY 1734);
    "" otherwise (also when the image cannot be read)."""
    if mask != (upright[1], upright[0]) or upright[0] == upright[1]:
        return ""
    try:
        with open_image(image, folder_id) as img:
            turned = exif_orientation(img) in (5, 6, 7, 8)
    except DatasetError:
        return ""
    if not turned:
        return ""
    return (
        f": {image.name} is stored {upright[1]}x{upright[0]} and turned upright by its EXIF orientation, "
        "so this mask was likely made from its stored pixels; make it from the upright image (e.g. "
        "PIL.ImageOps.exif_transpose)"
    )


def _alpha_items(items: list[ImageItem]) -> tuple[list[ImageItem], list[str]]:
    """The items whose image has an alpha channel, masked by it."""
    out = [
        replace(it, mask=MaskRef(it.path, it.folder_id, alpha=True)) if has_alpha(it) else it for it in items
    ]
    return out, []


def _fingerprint(base: str, items: list[ImageItem]) -> str:
    """The dataset fingerprint with the masks: each masked image's mask file bytes (or "alpha")."""
    from lorastudio.data.scan import file_sha256

    rows = [
        [
            it.path.name,
            "alpha" if it.mask.alpha else [it.mask.path.name, file_sha256(it.mask.path, it.mask.folder_id)],
        ]
        for it in items
        if it.mask is not None
    ]
    payload = json.dumps(sorted(rows), separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(f"lorastudio-masks-v1\n{base}\n".encode() + payload).hexdigest()


def load_mask(item: ImageItem) -> Image.Image:
    """The item's mask as an upright "L" image of the image's size (white = trained fully).
    Raises DatasetError naming the file when it cannot be decoded."""
    ref = item.mask
    if ref is None:
        raise ValueError(f"{item.path.name} has no mask")
    with open_image(ref.path, ref.folder_id) as img:
        orientation = exif_orientation(img)
        try:
            img.load()
            grey = eight_bit(img).convert("RGBA").getchannel("A") if ref.alpha else mask_grey(img)
        except DECODE_ERRORS as err:
            raise DatasetError(f"cannot decode mask {ref.path.name}", [f"{ref.path.name}: {err}"]) from None
    fix = ORIENTATION_FIX.get(orientation)
    return grey.transpose(fix) if fix is not None else grey


def mask_crop(item: ImageItem, crop_top_left: tuple[int, int], flip: bool, scale: int) -> np.ndarray | None:
    """The mask of one crop of `item` on the latent grid: [bucket_h // scale, bucket_w // scale]
    float32 in [0, 1], or None for an item without a mask. The mask is resized like the image
    (Lanczos to cover the bucket, clipped to [0, 1]), cut at the crop's `crop_top_left` (as
    data.crop.CroppedImage reports it: mirrored when flipped) and flipped with it, then
    box-averaged by the VAE's `scale`. Draws nothing from any rng."""
    if item.mask is None:
        return None
    grey = load_mask(item)
    bw, bh = item.bucket
    rw, rh = resized_size(grey.width, grey.height, item.bucket)
    top, left = crop_top_left
    if flip:  # undo the mirroring of `left` that load_crop reports for a flipped crop
        left = rw - left - bw
    arr = (
        np.asarray(cover_crop(grey, (rw, rh), (top, left), item.bucket), dtype=np.float32) / 255.0
    )  # [bh, bw]
    if flip:
        arr = arr[:, ::-1]  # [bh, bw] mirrored
    pixels = Image.fromarray(np.ascontiguousarray(np.clip(arr, 0.0, 1.0), dtype=np.float32))  # mode "F"
    small = pixels.resize((bw // scale, bh // scale), Image.Resampling.BOX)  # the latent grid
    return np.asarray(small, dtype=np.float32).copy()  # [h, w]


def _names(items: list[ImageItem], masked: bool, labels: Sequence[str]) -> list[str]:
    """The sorted names (data.items.item_name) of the images with (masked) or without a mask,
    each image of each entry once (an image at several resolutions has one copy per side)."""
    return sorted({item_name(it, labels) for it in items if (it.mask is not None) == masked})


def mask_section(
    items: list[ImageItem], alpha_mask: bool, labels: Sequence[str] = ()
) -> dict[str, object] | None:
    """The preflight report's mask section (None when no image is masked): where the masks come
    from, how many images have one and the names of those without (they train unmasked);
    `labels`: DatasetScan.labels, naming each image's entry."""
    masked = _names(items, True, labels)
    if not masked:
        return None
    without = _names(items, False, labels)
    return {
        "source": "alpha channel" if alpha_mask else f"{MASKS_DIR}/ folder",
        "images_with_mask": len(masked),
        "without_mask": without,
    }


def mask_warning(items: list[ImageItem], labels: Sequence[str] = ()) -> str | None:
    """The preflight's warning naming the images that train unmasked in a masked dataset."""
    if not any(it.mask for it in items):
        return None
    without = _names(items, False, labels)
    if not without:
        return None
    return f"{len(without)} image(s) have no mask and train unmasked: {', '.join(without)}"
