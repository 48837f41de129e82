"""Load one dataset image resized and cropped to its bucket, as a float array (no torch)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from lorastudio.data.buckets import MAX_RATIO
from lorastudio.data.images import load_rgb
from lorastudio.data.items import ImageItem, item_name

# Pillow's reducing_gap: box-reduce first, then Lanczos; visually identical and much faster.
_REDUCING_GAP = 3.0
# An enlargement to cover a bucket larger than this many times the bucket's area is made of the
# crop's window alone (`cover_crop`): a 1x4000 strip covering a 512x2048 bucket is 2 G pixels
# enlarged whole (RELIABILITY 1036).
WINDOW_AREA = 16
_LANCZOS_ROWS = 4  # source rows beyond a window that Lanczos (support 3 when enlarging) reads, rounded up


@dataclass(frozen=True)
class CroppedImage:
    """One training crop.

    pixels: [3, H, W] float32 in [-1, 1], H and W the bucket height and width.
    original_size: (height, width) of the source image after EXIF transpose.
    crop_top_left: (top, left) of the crop in the resized image; when flipped, left is mirrored
    (SDXL convention: left' = resized_width - left - bucket_width).
    """

    pixels: np.ndarray
    original_size: tuple[int, int]
    crop_top_left: tuple[int, int]


def resized_size(width: int, height: int, bucket: tuple[int, int]) -> tuple[int, int]:
    """(width, height) after scaling (width, height) to cover `bucket` (keeping aspect ratio).

    scale = max(bucket_w / width, bucket_h / height); each side is rounded and never smaller
    than the bucket's.
    """
    bw, bh = bucket
    scale = max(bw / width, bh / height)
    return max(bw, round(width * scale)), max(bh, round(height * scale))


def same_shape(control: tuple[int, int], target_resized: tuple[int, int]) -> bool:
    """Whether a control of size `control` (width, height) pictures its target's frame, resized to
    `target_resized` (width, height): stretched to it, no edge moves further than rounding either
    image to whole pixels accounts for (half a control pixel scaled up, plus a target pixel). A
    half-size copy of a 1000x667 target (500x333) is; a square control of a 3:2 target is not."""
    (cw, ch), (tw, th) = control, target_resized
    sx, sy = tw / cw, th / ch
    tolerance = 0.5 * max(sx, sy) + 1.0
    return abs(ch * sx - th) <= tolerance and abs(cw * sy - tw) <= tolerance


def crop_offset(
    resized: tuple[int, int], bucket: tuple[int, int], *, random_crop: bool, rng: np.random.Generator
) -> tuple[int, int]:
    """(top, left) of the bucket-sized crop of an image resized to `resized` (width, height): a
    random crop draws top, then left, from `rng` (the only draws a crop makes); else centred."""
    (rw, rh), (bw, bh) = resized, bucket
    if random_crop:
        return int(rng.integers(0, rh - bh + 1)), int(rng.integers(0, rw - bw + 1))
    return (rh - bh) // 2, (rw - bw) // 2


def windowed(size: tuple[int, int], resized: tuple[int, int], bucket: tuple[int, int]) -> bool:
    """Whether `cover_crop` makes an image of `size` (width, height) scaled to `resized` for
    `bucket` from its crop's window alone: an enlargement whose whole exceeds WINDOW_AREA times
    the bucket (data/pixel_rule.py names such files: fix 1036 reads them otherwise)."""
    (w, h), (rw, rh), (bw, bh) = size, resized, bucket
    return rw >= w and rh >= h and (rw, rh) != (w, h) and rw * rh > WINDOW_AREA * bw * bh


def cover_crop(
    img: Image.Image, resized: tuple[int, int], top_left: tuple[int, int], bucket: tuple[int, int]
) -> Image.Image:
    """The `bucket`-sized (width, height) window at `top_left` (top, left) of `img` scaled to
    `resized` (width, height; `resized_size`'s) with Lanczos: the image resized whole (Pillow's
    reducing_gap), then cropped. An enlargement whose whole would exceed WINDOW_AREA times the
    bucket (an image of an aspect ratio far beyond its bucket's: 1x4000, 8000x8, which would
    otherwise take gigabytes and minutes per crop) is made of the window alone, in two passes of
    the same Lanczos filter: the window's columns of the rows it reads, then its rows (Pillow's
    two-axis `box` resize is not used: its 8-bit result differs from the whole resize by up to
    ~50 levels); the pixels are the whole resize's within 2 levels of rounding. Memory: the
    window and the source, never the enlarged whole. Shared by targets, controls, masks and
    generation's reference images."""
    (w, h), (rw, rh), (bw, bh) = img.size, resized, bucket
    top, left = top_left
    if not windowed(img.size, resized, bucket):
        if (rw, rh) != (w, h):
            img = img.resize((rw, rh), Image.Resampling.LANCZOS, reducing_gap=_REDUCING_GAP)
        return img.crop((left, top, left + bw, top + bh))
    sx, sy = w / rw, h / rh  # source pixels per resized pixel, <= 1
    y0 = max(0, math.floor(top * sy) - _LANCZOS_ROWS)
    y1 = min(h, math.ceil((top + bh) * sy) + _LANCZOS_ROWS)
    rows = img.crop((0, y0, w, y1))  # [y1 - y0, w] the source rows the window reads
    wide = rows.resize((bw, y1 - y0), Image.Resampling.LANCZOS, box=(left * sx, 0, (left + bw) * sx, y1 - y0))
    return wide.resize((bw, bh), Image.Resampling.LANCZOS, box=(0, top * sy - y0, bw, (top + bh) * sy - y0))


NAMED_FILES = 10  # files named in the warning; the rest are counted


def crop_warning(items: Sequence[ImageItem], random_crop: bool, labels: Sequence[str] = ()) -> str | None:
    """The preflight line naming the images random_crop cannot move (None when it moves every
    one, or is off): scaled to cover their bucket they fill it exactly (resized_size == bucket)
    at each of their resolutions, so their one crop is the whole image, as without random_crop
    (names as data.items.item_name with `labels`)."""
    if not random_crop or not items:
        return None
    room: dict[str, bool] = {}  # an image at several resolutions: movable at any of them
    for i in items:
        name = item_name(i, labels)
        room[name] = room.get(name, False) or resized_size(i.width, i.height, i.bucket) != i.bucket
    fixed = sorted(name for name, movable in room.items() if not movable)
    if not fixed:
        return None
    named = ", ".join(fixed[:NAMED_FILES]) + (
        f" and {len(fixed) - NAMED_FILES} more" if len(fixed) > NAMED_FILES else ""
    )
    return (
        f"random_crop moves {len(room) - len(fixed)} of {len(room)} image(s): {len(fixed)} fill their bucket "
        f"exactly (same aspect ratio), so their only crop is the whole image: {named}"
    )


def load_crop(item: ImageItem, *, random_crop: bool, flip: bool, rng: np.random.Generator) -> CroppedImage:
    """Decode `item`, scale it to cover its bucket (Lanczos), crop to exactly the bucket.

    Takes: random_crop (False = centre crop), flip (mirror horizontally), rng (used only for a
    random crop: top then left are drawn, so the result is a function of the rng state).
    Returns: a CroppedImage whose pixels are [3, bucket_h, bucket_w] float32 in [-1, 1].
    Raises: DatasetError if the file can no longer be decoded, its bytes are no longer those the
    scan read (data.scan.check_unchanged), or it or its folder was replaced by a symbolic link
    since the scan.
    """
    from lorastudio.data.scan import check_unchanged  # scan -> pairs -> crop

    check_unchanged(item)
    img = load_rgb(item.path, item.folder_id)
    width, height = img.size
    bw, bh = item.bucket
    rw, rh = resized_size(width, height, item.bucket)
    top, left = crop_offset((rw, rh), item.bucket, random_crop=random_crop, rng=rng)
    arr = np.asarray(cover_crop(img, (rw, rh), (top, left), item.bucket), dtype=np.uint8)  # [bh, bw, 3]
    if flip:
        arr = arr[:, ::-1]  # [bh, bw, 3] mirrored
        left = rw - left - bw
    pixels = arr.astype(np.float32).transpose(2, 0, 1) / 127.5 - 1.0  # [3, bh, bw] in [-1, 1]
    return CroppedImage(
        pixels=np.ascontiguousarray(pixels, dtype=np.float32),
        original_size=(height, width),
        crop_top_left=(top, left),
    )


CUT_WARN_SHARE = 0.25  # the preflight names images whose crop cuts away more than this share


def cut_share(item: ImageItem) -> float:
    """The share of the image (scaled to cover its bucket) that its bucket-sized crop cuts away."""
    rw, rh = resized_size(item.width, item.height, item.bucket)
    return 1.0 - (item.bucket[0] * item.bucket[1]) / (rw * rh)


def cut_warning(items: Sequence[ImageItem], aspect_buckets: bool, labels: Sequence[str] = ()) -> str | None:
    """The preflight line naming the images whose crop cuts away more than CUT_WARN_SHARE of them
    (at their least cut resolution; names as data.items.item_name with `labels`), most cut first:
    an aspect ratio beyond the buckets' (data.buckets.MAX_RATIO) or between coarse buckets (a low
    resolution), or any non-square image without aspect_buckets. None when there are none."""
    least: dict[str, float] = {}
    for i in items:
        name = item_name(i, labels)
        least[name] = min(cut_share(i), least.get(name, 1.0))
    found = sorted(((n, c) for n, c in least.items() if c > CUT_WARN_SHARE), key=lambda nc: (-nc[1], nc[0]))
    if not found:
        return None
    named = ", ".join(f"{name} ({cut:.0%} cut)" for name, cut in found[:NAMED_FILES])
    more = f" and {len(found) - NAMED_FILES} more" if len(found) > NAMED_FILES else ""
    why, hint = (
        (
            f"no bucket has their shape: buckets span 1:{MAX_RATIO:g} to {MAX_RATIO:g}:1 in steps of the "
            "side multiple",
            "crop them to what matters",
        )
        if aspect_buckets
        else (
            "aspect_buckets is off: every bucket is square",
            "set aspect_buckets = true to train them in their own shape",
        )
    )
    return (
        f"{len(found)} image(s) lose more than {CUT_WARN_SHARE:.0%} to the crop of their bucket ({why}): "
        f"{named}{more}; {hint}"
    )
