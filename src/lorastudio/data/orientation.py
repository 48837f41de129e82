"""EXIF orientation: which way up a photo is shown (no torch). Phones and cameras store a portrait
photo as the sensor read it (landscape) and say in its EXIF how a viewer turns it; every path that
reads an image applies it (images.load_rgb, the thumbnails, the masks), sizes are given after it
(`upright_size`: the buckets, the dataset page).

`header_has_exif` finds out from a file's header alone, by seeking over its segments (no Pillow,
no segment kept), whether it holds EXIF where Pillow's header-only open reads it, or XMP (whose
`tiff:Orientation` Pillow's `getexif` takes where the EXIF has none): the dataset listing opens
only those files with Pillow (data/dataset_detail.py).
"""

from __future__ import annotations

import io
import re
import struct
from typing import BinaryIO

from PIL import Image

from lorastudio.data.image_headers import DECODE_ERRORS, PNG_SIGNATURE, png_chunk_before_data

EXIF_ORIENTATION_TAG = 0x0112
# EXIF orientation -> the transpose that makes the image upright (same table as ImageOps).
ORIENTATION_FIX: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SWAPS_AXES = frozenset({5, 6, 7, 8})
_EXIF_APP1 = b"Exif\0\0"  # the start of a JPEG's EXIF segment (APP1)
_XMP_APP1 = b"http://ns.adobe.com/xap/1.0/\0"  # the start of a JPEG's XMP segment (APP1), as Pillow reads it
_JPEG_SEGMENTS = 256  # segments walked before a JPEG's image data; more: read it with Pillow
_PNG_CHUNKS = 64  # chunks walked before a PNG's image data; more: read it with Pillow
_WEBP_VP8X_METADATA = 0x08 | 0x04  # the EXIF and XMP flags of a WebP's VP8X flags byte
# an XMP packet's orientation, as Pillow's getexif reads it (its own pattern, on the packet's bytes)
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')


def exif_orientation(img: Image.Image) -> int:
    """The EXIF orientation (1-8; 1 when absent or invalid) without decoding pixels.

    PNG is read only from an eXIf chunk placed before the image data (as the PNG spec asks),
    because Pillow would otherwise decode the whole image to look for a later one.
    """
    if img.format == "PNG" and "exif" not in img.info:
        return 1
    try:
        value = img.getexif().get(EXIF_ORIENTATION_TAG)
    except DECODE_ERRORS:
        return 1
    if value is None:
        value = _xmp_orientation(img)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _xmp_orientation(img: Image.Image) -> int | None:
    """The `tiff:Orientation` of a JPEG's or WebP's XMP packet (`img.info["xmp"]`, bytes), None
    where it has none. Pillow's `getexif` takes it where the EXIF has none from 11.2 on; 11.0-11.1
    (pyproject's floor is 11) read only a PNG's XMP key, so a phone photo whose orientation is in
    its XMP alone trained sideways there, and the listing showed it so (RELIABILITY 1470)."""
    packet = img.info.get("xmp")
    if not isinstance(packet, bytes):
        return None
    match = _XMP_ORIENTATION.search(packet)
    return int(match[2]) if match else None


def upright_size(width: int, height: int, orientation: int) -> tuple[int, int]:
    """(width, height) of an image stored `width` x `height` once its EXIF `orientation` is
    applied (a phone's portrait photo stored 4000x3000 with orientation 6 is 3000x4000)."""
    return (height, width) if orientation in _SWAPS_AXES else (width, height)


def header_has_exif(fh: BinaryIO) -> bool:
    """Whether the file `fh` (open at its start) may hold an EXIF orientation that
    `exif_orientation` reads: a JPEG's APP1 "Exif" or XMP segment before its image data, a PNG's
    eXIf chunk before its image data, a WebP whose VP8X flags say it has EXIF or XMP (Pillow's
    `getexif` takes an XMP `tiff:Orientation` where the EXIF has none: RELIABILITY 1104). True
    also where the walk cannot tell (more segments or chunks than it walks, a header cut short):
    Pillow is then asked."""
    head = fh.read(30)
    if head[:2] == b"\xff\xd8":
        fh.seek(2)
        return _jpeg_exif(fh)
    if head[:8] == PNG_SIGNATURE:
        fh.seek(8)
        return _png_exif(fh)
    if head[:4] == b"RIFF" and head[8:16] == b"WEBPVP8X" and len(head) > 20:
        return bool(head[20] & _WEBP_VP8X_METADATA)
    return False


def _jpeg_exif(fh: BinaryIO) -> bool:
    """Whether a JPEG (open after its SOI) has an APP1 "Exif" or XMP segment before its first
    scan (SOS): Pillow's header-only open reads every segment up to there, those after the frame
    header (SOF) too, where T.81 lets tables and APPn segments stand (RELIABILITY 1102)."""
    for _ in range(_JPEG_SEGMENTS):
        head = fh.read(4)
        if len(head) != 4 or head[0] != 0xFF:
            return True  # malformed here: Pillow decides
        marker = head[1]
        if marker in (0xDA, 0xD9):
            return False  # the image data (or the end): no EXIF that Pillow reads before it
        length = struct.unpack(">H", head[2:])[0]
        if marker == 0xE1 and length >= 8:
            start = fh.read(min(length - 2, len(_XMP_APP1)))
            if start.startswith(_EXIF_APP1) or start == _XMP_APP1:
                return True
            fh.seek(length - 2 - len(start), io.SEEK_CUR)
        else:
            fh.seek(length - 2, io.SEEK_CUR)
    return True


def _png_exif(fh: BinaryIO) -> bool:
    """Whether a PNG may hold EXIF: an eXIf chunk before its image data, or a header cut short
    or too long to tell (then Pillow is asked)."""
    return png_chunk_before_data(fh, b"eXIf", _PNG_CHUNKS) is not False
