"""Open, check and decode dataset images with Pillow (no torch).

Only PNG, JPEG (and MPO, the multi-picture JPEG of phones) and WebP decoders are ever used, so
a file with an image extension cannot reach Pillow's riskier plugins. Sizes are checked from the
header before any pixel is decoded, so oversized images and decompression bombs are refused
cheaply. Sizes reported here are after EXIF transpose.

PNG files are walked chunk by chunk before Pillow sees them (`_walk_png`): every CRC is checked
in bounded pieces, huge ancillary chunks are refused, and chunks Pillow has no use for (private
or unknown ancillary data, APNG frames) are hidden from it, because Pillow would otherwise keep
every private chunk in memory.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
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

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Ancillary chunks above this size are refused (real ICC profiles and metadata are far smaller).
MAX_PNG_ANCILLARY_CHUNK_BYTES = 16 * 2**20
# More chunks than this are refused (walking them would cost seconds of CPU).
MAX_PNG_CHUNKS = 1_000_000
_PNG_READ_PIECE = 2**20  # bytes read at once while checking a chunk's CRC
# Ancillary chunks passed on to Pillow; all others (private/unknown data, APNG frames) are hidden.
_PNG_ANCILLARY_USED = frozenset(
    {b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"pHYs", b"tEXt", b"zTXt", b"iTXt", b"eXIf"}
)

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


def _read_exact(fh: io.BufferedReader, size: int, path: Path, what: str) -> bytes:
    data = fh.read(size)
    if len(data) != size:
        raise _bad(path, f"corrupt (truncated PNG file: {what} cut short)")
    return data


def _walk_png(path: Path) -> list[tuple[int, int]] | None:
    """Check every chunk of a PNG file without holding a chunk in memory.

    Takes: any file. Returns None when it does not start with the PNG signature (not a PNG);
    otherwise the byte ranges [(start, length)] of the file that Pillow should see: the
    signature, every critical chunk and the ancillary chunks in `_PNG_ANCILLARY_USED`, adjacent
    ranges merged, up to and including IEND.
    Raises: DatasetError when the file is truncated, has a bad chunk length, type or CRC, does
    not start with IHDR, has more than MAX_PNG_CHUNKS chunks, or has an ancillary chunk larger
    than MAX_PNG_ANCILLARY_CHUNK_BYTES.
    """
    with path.open("rb") as fh:
        if fh.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
            return None
        ranges: list[tuple[int, int]] = [(0, len(PNG_SIGNATURE))]
        offset = len(PNG_SIGNATURE)
        for index in range(MAX_PNG_CHUNKS):
            length, ctype = struct.unpack(">I4s", _read_exact(fh, 8, path, "chunk header"))
            name = ctype.decode("latin-1")
            if not ctype.isalpha() or not ctype.isascii():
                raise _bad(path, f"corrupt (invalid PNG chunk type {ctype!r})")
            if length > 2**31 - 1:
                raise _bad(path, f"corrupt (PNG chunk {name} claims {length:,} bytes)")
            if index == 0 and ctype != b"IHDR":
                raise _bad(path, f"corrupt (PNG starts with {name}, not IHDR)")
            ancillary = ctype[:1].islower()
            if ancillary and length > MAX_PNG_ANCILLARY_CHUNK_BYTES:
                raise _bad(
                    path,
                    f"refused: ancillary PNG chunk {name} of {length:,} bytes is larger than the "
                    f"{MAX_PNG_ANCILLARY_CHUNK_BYTES // 2**20} MB allowed for metadata",
                )
            crc = zlib.crc32(ctype)
            left = length
            while left:
                piece = _read_exact(fh, min(left, _PNG_READ_PIECE), path, f"chunk {name}")
                crc = zlib.crc32(piece, crc)
                left -= len(piece)
            (stored_crc,) = struct.unpack(">I", _read_exact(fh, 4, path, f"chunk {name} CRC"))
            if stored_crc != crc:
                raise _bad(path, f"corrupt (bad CRC in PNG chunk {name})")
            size = 12 + length
            if not ancillary or ctype in _PNG_ANCILLARY_USED:
                last_start, last_len = ranges[-1]
                if last_start + last_len == offset:
                    ranges[-1] = (last_start, last_len + size)
                else:
                    ranges.append((offset, size))
            offset += size
            if ctype == b"IEND":
                return ranges
    raise _bad(path, f"refused: more than {MAX_PNG_CHUNKS:,} PNG chunks")


class _RangesFile(io.RawIOBase):
    """A read-only seekable view of chosen byte ranges of an open file, as one stream.

    Takes: the real file (kept open by the caller) and [(start, length)] ranges in file order.
    """

    def __init__(self, real: io.BufferedReader, ranges: list[tuple[int, int]]) -> None:
        super().__init__()
        self._real = real
        self._ranges: list[tuple[int, int, int]] = []  # (view start, file start, length)
        view = 0
        for start, length in ranges:
            self._ranges.append((view, start, length))
            view += length
        self._size = view
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        out = memoryview(buffer).cast("B")
        done = 0
        for view_start, file_start, length in self._ranges:
            if done == len(out) or self._pos >= self._size:
                break
            if self._pos >= view_start + length:
                continue
            skip = self._pos - view_start
            take = min(length - skip, len(out) - done)
            self._real.seek(file_start + skip)
            got = self._real.readinto(out[done : done + take])
            done += got
            self._pos += got
            if got < take:
                break
        return done


@contextmanager
def _open(path: Path) -> Iterator[Image.Image]:
    """Open lazily (header only) with the allowed decoders; PNGs are walked first (`_walk_png`)
    and shown to Pillow without the chunks it does not need. Raises DatasetError."""
    ranges = _walk_png(path)
    with path.open("rb") as real:
        source: io.IOBase = real
        if ranges is not None and ranges != [(0, ranges[0][1])]:
            source = _RangesFile(real, ranges)
        try:
            img = Image.open(source, formats=ALLOWED_FORMATS)
        except Image.DecompressionBombError as err:
            raise _bad(path, f"oversized (decompression bomb refused: {err})") from None
        except _DECODE_ERRORS as err:
            raise _bad(path, f"corrupt or not a PNG/JPEG/WebP image ({err})") from None
        with img:
            yield img


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
    """Cheap full-file check: JPEG decoded at 1/8 scale, WebP decoded; PNG chunk CRCs were
    already checked by `_walk_png` when the file was opened."""
    if img.format == "PNG":
        return
    try:
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
    with _open(path) as img:
        width, height = img.size
        if width < 1 or height < 1:
            raise _bad(path, f"corrupt (size {width}x{height})")
        if width * height > max_pixels:
            raise _bad(
                path, f"oversized ({width}x{height} = {width * height:,} pixels > limit {max_pixels:,})"
            )
        orientation = exif_orientation(img)
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
