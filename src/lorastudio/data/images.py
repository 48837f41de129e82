"""Open, check and decode dataset images with Pillow (no torch).

Only PNG, JPEG (and MPO, the multi-picture JPEG of phones) and WebP decoders are ever used, so
a file with an image extension cannot reach Pillow's riskier plugins. Sizes are checked from the
header before any pixel is decoded, so oversized images and decompression bombs are refused
cheaply. Sizes reported here are after EXIF transpose.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from lorastudio.errors import DatasetError

# Pillow's JPEG opener also returns MPO (multi-picture JPEG) images.
ALLOWED_FORMATS = ("PNG", "JPEG", "WEBP")
EXIF_ORIENTATION_TAG = 0x0112

# EXIF orientation -> the transpose that makes the image upright (same table as ImageOps).
_ORIENTATION_FIX: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SWAPS_AXES = frozenset({5, 6, 7, 8})

# What Pillow raises for unreadable, truncated or malformed files.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error, IndexError)


@dataclass(frozen=True)
class ImageInfo:
    """Header facts of one image: size after EXIF transpose, and the EXIF orientation (1-8)."""

    width: int
    height: int
    orientation: int


def _bad(path: Path, reason: str) -> DatasetError:
    return DatasetError(f"cannot use image {path.name}", [f"{path.name}: {reason}"])


def _open(path: Path) -> Image.Image:
    """Open lazily (header only) with the allowed decoders; raises DatasetError."""
    try:
        return Image.open(path, formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as err:
        raise _bad(path, f"oversized (decompression bomb refused: {err})") from None
    except _DECODE_ERRORS as err:
        raise _bad(path, f"corrupt or not a PNG/JPEG/WebP image ({err})") from None


def exif_orientation(img: Image.Image) -> int:
    """The EXIF orientation (1-8; 1 when absent or invalid) without decoding pixels.

    PNG is read only from an eXIf chunk placed before the image data (as the PNG spec asks),
    because Pillow would otherwise decode the whole image to look for a later one.
    """
    if img.format == "PNG" and "exif" not in img.info:
        return 1
    try:
        value = img.getexif().get(EXIF_ORIENTATION_TAG, 1)
    except _DECODE_ERRORS:
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _check_decodes(path: Path, img: Image.Image) -> None:
    """Cheap full-file check: PNG chunk CRCs, JPEG decoded at 1/8 scale, WebP decoded."""
    try:
        if img.format == "PNG":
            img.verify()
        else:
            if img.format in ("JPEG", "MPO"):
                img.draft("RGB", (max(1, img.width // 8), max(1, img.height // 8)))
            img.load()
    except _DECODE_ERRORS as err:
        raise _bad(path, f"corrupt ({err})") from None


def probe_image(path: Path, max_pixels: int) -> ImageInfo:
    """Check one image and return its size after EXIF transpose.

    The size limit is checked from the header before any decoding: width*height > max_pixels is
    refused ("oversized"). Files that pass are then checked for corruption cheaply (see
    `_check_decodes`).
    Raises: DatasetError with one problem "<file name>: <reason>" (corrupt, oversized, unknown
    format).
    """
    img = _open(path)
    with img:
        width, height = img.size
        if width < 1 or height < 1:
            raise _bad(path, f"corrupt (size {width}x{height})")
        if width * height > max_pixels:
            raise _bad(
                path, f"oversized ({width}x{height} = {width * height:,} pixels > limit {max_pixels:,})"
            )
        orientation = exif_orientation(img)
    with _open(path) as img:
        _check_decodes(path, img)
    if orientation in _SWAPS_AXES:
        width, height = height, width
    return ImageInfo(width=width, height=height, orientation=orientation)


def _to_rgb(img: Image.Image) -> Image.Image:
    """Convert any decoded mode to RGB; transparency is composited onto white."""
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        arr = np.asarray(img, dtype=np.float64)  # [H, W] 16-bit range
        img = Image.fromarray(np.clip(arr / 257.0 + 0.5, 0, 255).astype(np.uint8), mode="L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img if img.mode == "RGB" else img.convert("RGB")


def load_rgb(path: Path) -> Image.Image:
    """Decode an image fully, apply its EXIF orientation and return it as RGB.

    Raises: DatasetError (one problem naming the file) if it cannot be decoded.
    """
    with _open(path) as img:
        orientation = exif_orientation(img)
        try:
            img.load()
            rgb = _to_rgb(img)
        except _DECODE_ERRORS as err:
            raise _bad(path, f"corrupt ({err})") from None
    fix = _ORIENTATION_FIX.get(orientation)
    return rgb.transpose(fix) if fix is not None else rgb
