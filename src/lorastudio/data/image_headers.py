"""Image file headers, read before Pillow sees a file (no pixel is decoded here).

Pillow trusts headers: it keeps every private PNG chunk and every JPEG APPn/COM segment in
memory when it opens a file, and reads a whole WebP file into memory to open it. So:

- `walk_png` walks a PNG chunk by chunk (every CRC checked in bounded pieces, huge ancillary
  chunks refused) and returns the byte ranges Pillow should see (`RangesFile` shows only those)
  and how many pictures an APNG holds (its animation chunks are among those hidden);
- `walk_jpeg` walks the JPEG markers up to the image data and refuses more than
  MAX_JPEG_HEADER_BYTES of metadata segments;
- WebP files larger than MAX_WEBP_BYTES are refused;
- `header_info` reads the stored width and height of a PNG, JPEG or WebP from its first bytes,
  and whether it has an alpha channel (listings use it: each file opened once, no file read
  whole, nothing decoded); `header_size` gives the size alone.

Hand-written because Pillow offers no bounded header reader; the formats' header layouts are
those of the PNG, JPEG (ITU T.81) and WebP (RIFF, VP8/VP8L/VP8X) specifications.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lorastudio.errors import DatasetError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What Pillow raises for unreadable, truncated or malformed files (images.py's decodes and
# orientation.py's EXIF reads).
DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, zlib.error, IndexError)
# Ancillary chunks above this size are refused (real ICC profiles and metadata are far smaller).
MAX_PNG_ANCILLARY_CHUNK_BYTES = 16 * 2**20
# More chunks than this are refused (walking them would cost seconds of CPU).
MAX_PNG_CHUNKS = 1_000_000
_PNG_READ_PIECE = 2**20  # bytes read at once while checking a chunk's CRC
# Ancillary chunks passed on to Pillow; all others (private/unknown data, APNG frames) are hidden.
_PNG_ANCILLARY_USED = frozenset(
    {b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"pHYs", b"tEXt", b"zTXt", b"iTXt", b"eXIf"}
)


def bad_image(path: Path, reason: str) -> DatasetError:
    """The DatasetError of one unusable image file: one problem "<name>: <reason>"."""
    return DatasetError(f"cannot use image {path.name}", [f"{path.name}: {reason}"])


def _read_exact(fh: BinaryIO, size: int, path: Path, what: str) -> bytes:
    data = fh.read(size)
    if len(data) != size:
        raise bad_image(path, f"corrupt (truncated PNG file: {what} cut short)")
    return data


@dataclass(frozen=True)
class PngWalk:
    """What `walk_png` found: the byte ranges [(start, length)] of the file Pillow should see,
    and the pictures the file holds: 1 for a still PNG; for an APNG its acTL chunk's frame count,
    plus its default image when that is not the first frame (no fcTL before IDAT), as Pillow
    counts them."""

    ranges: list[tuple[int, int]]
    frames: int = 1


def walk_png(fh: BinaryIO, path: Path) -> PngWalk | None:
    """Check every chunk of a PNG file without holding a chunk in memory.

    Takes: any file, open at its start (`path` names it in errors). Returns None when it does not start with the PNG signature (not a PNG);
    otherwise a PngWalk: the byte ranges of the file that Pillow should see (the file is left at an unspecified position): the
    signature, every critical chunk and the ancillary chunks in `_PNG_ANCILLARY_USED`, adjacent
    ranges merged, up to and including IEND (an APNG's animation chunks are hidden: Pillow sees
    its default image), and how many pictures the file holds (PngWalk.frames).
    Raises: DatasetError when the file is truncated, has a bad chunk length, type or CRC, does
    not start with IHDR, has more than MAX_PNG_CHUNKS chunks, or has an ancillary chunk larger
    than MAX_PNG_ANCILLARY_CHUNK_BYTES.
    """
    if fh.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
        return None
    ranges: list[tuple[int, int]] = [(0, len(PNG_SIGNATURE))]
    offset = len(PNG_SIGNATURE)
    animation = 0  # acTL's num_frames
    default_is_frame = False  # an fcTL before the first IDAT
    seen_idat = False
    for index in range(MAX_PNG_CHUNKS):
        length, ctype = struct.unpack(">I4s", _read_exact(fh, 8, path, "chunk header"))
        name = ctype.decode("latin-1")
        if not ctype.isalpha() or not ctype.isascii():
            raise bad_image(path, f"corrupt (invalid PNG chunk type {ctype!r})")
        if length > 2**31 - 1:
            raise bad_image(path, f"corrupt (PNG chunk {name} claims {length:,} bytes)")
        if index == 0 and ctype != b"IHDR":
            raise bad_image(path, f"corrupt (PNG starts with {name}, not IHDR)")
        ancillary = ctype[:1].islower()
        if ancillary and length > MAX_PNG_ANCILLARY_CHUNK_BYTES:
            raise bad_image(
                path,
                f"refused: ancillary PNG chunk {name} of {length:,} bytes is larger than the "
                f"{MAX_PNG_ANCILLARY_CHUNK_BYTES // 2**20} MB allowed for metadata",
            )
        crc = zlib.crc32(ctype)
        left = length
        while left:
            piece = _read_exact(fh, min(left, _PNG_READ_PIECE), path, f"chunk {name}")
            if ctype == b"acTL" and left == length and len(piece) >= 4:  # num_frames, then num_plays
                animation = int.from_bytes(piece[:4], "big")
            crc = zlib.crc32(piece, crc)
            left -= len(piece)
        (stored_crc,) = struct.unpack(">I", _read_exact(fh, 4, path, f"chunk {name} CRC"))
        if stored_crc != crc:
            raise bad_image(path, f"corrupt (bad CRC in PNG chunk {name})")
        size = 12 + length
        if ctype == b"fcTL" and not seen_idat:
            default_is_frame = True
        seen_idat = seen_idat or ctype == b"IDAT"
        if not ancillary or ctype in _PNG_ANCILLARY_USED:
            last_start, last_len = ranges[-1]
            if last_start + last_len == offset:
                ranges[-1] = (last_start, last_len + size)
            else:
                ranges.append((offset, size))
        offset += size
        if ctype == b"IEND":
            frames = animation + (0 if default_is_frame else 1) if animation else 1
            return PngWalk(ranges, frames)
    raise bad_image(path, f"refused: more than {MAX_PNG_CHUNKS:,} PNG chunks")


class RangesFile(io.RawIOBase):
    """A read-only seekable view of chosen byte ranges of an open file, as one stream.

    Takes: the real file (kept open by the caller) and [(start, length)] ranges in file order.
    """

    def __init__(self, real: BinaryIO, ranges: list[tuple[int, int]]) -> None:
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


# Metadata segments (APPn, COM) of a JPEG above this total are refused (real EXIF/ICC/XMP data
# is far smaller; Pillow keeps every segment in memory when it opens a file).
MAX_JPEG_HEADER_BYTES = 16 * 2**20
# WebP files above this size are refused: Pillow reads a WebP file whole to open it.
MAX_WEBP_BYTES = 64 * 2**20
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def walk_jpeg(fh: BinaryIO, path: Path) -> tuple[int, int] | None:
    """Walk a JPEG's markers up to its first frame header, without keeping any segment.

    Takes: any file, open at its start. Returns None when it does not start with a JPEG SOI
    marker; else (width, height) stored in the frame header (0 when not given there).
    Raises: DatasetError when the header is truncated or malformed, or its metadata segments
    exceed MAX_JPEG_HEADER_BYTES in total.
    """
    if fh.read(2) != b"\xff\xd8":
        return None
    metadata = 0
    while True:
        head = fh.read(2)
        while head[:1] == b"\xff" and head[1:] == b"\xff":  # fill bytes before a marker
            head = b"\xff" + fh.read(1)
        if len(head) != 2 or head[0] != 0xFF:
            raise bad_image(path, "corrupt (truncated or malformed JPEG header)")
        marker = head[1]
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            continue
        raw = fh.read(2)
        if len(raw) != 2 or struct.unpack(">H", raw)[0] < 2:
            raise bad_image(path, "corrupt (truncated or malformed JPEG header)")
        length = struct.unpack(">H", raw)[0] - 2
        if marker in _SOF_MARKERS:
            frame = fh.read(5)
            if len(frame) != 5:
                raise bad_image(path, "corrupt (truncated JPEG frame header)")
            height, width = struct.unpack(">HH", frame[1:5])
            return width, height
        if marker == 0xDA:  # image data before any frame header
            raise bad_image(path, "corrupt (JPEG image data before its frame header)")
        if 0xE0 <= marker <= 0xEF or marker == 0xFE:
            metadata += length
            if metadata > MAX_JPEG_HEADER_BYTES:
                raise bad_image(
                    path,
                    f"refused: JPEG metadata segments larger than the "
                    f"{MAX_JPEG_HEADER_BYTES // 2**20} MB allowed",
                )
        fh.seek(length, io.SEEK_CUR)


def webp_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from the first 30 bytes of a WebP file; None if they are not a WebP."""
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    kind = head[12:16]
    if kind == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    if kind == b"VP8L" and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        width = int.from_bytes(head[26:28], "little") & 0x3FFF
        height = int.from_bytes(head[28:30], "little") & 0x3FFF
        return width, height
    return None


def check_header(fh: BinaryIO, path: Path) -> PngWalk | None:
    """Check a file's header before Pillow opens it (see the module docstring).

    Returns a PNG's walk (`walk_png`: the ranges Pillow should see, its frame count), else None
    (show it the whole file). The file is left at its start. Raises: DatasetError for what the
    walks refuse and for a WebP file over MAX_WEBP_BYTES.
    """
    png = walk_png(fh, path)
    fh.seek(0)
    if png is None:
        walk_jpeg(fh, path)
        fh.seek(0)
        head = fh.read(30)
        fh.seek(0)
        if webp_size(head) is not None:
            size = fh.seek(0, io.SEEK_END)
            fh.seek(0)
            if size > MAX_WEBP_BYTES:
                raise bad_image(
                    path,
                    f"refused: WebP file of {size:,} bytes is larger than the "
                    f"{MAX_WEBP_BYTES // 2**20} MB allowed",
                )
    return png


# Chunks of a grey, RGB or palette PNG walked (before its image data) to look for tRNS; more: the
# header cannot tell (`header_info` leaves the flag to Pillow).
_PNG_ALPHA_CHUNKS = 64
# Whether a PNG of each colour type (IHDR) has transparency: grey+alpha (LA) and RGBA have an
# alpha channel; greyscale, RGB and palette have transparency when a tRNS chunk gives it (a
# palette's alpha, or the one grey or RGB value that is transparent: images.has_transparency).
_PNG_COLOUR_ALPHA = {0: None, 2: None, 3: None, 4: True, 6: True}
_WEBP_VP8X_ALPHA = 0x10  # the alpha flag of a VP8X chunk's flags byte


@dataclass(frozen=True)
class HeaderInfo:
    """What a file's header says: the stored size (before EXIF orientation) and whether Pillow
    opens it with an alpha channel (`masks.image_has_alpha`); `alpha` None: the header cannot
    tell (open it with Pillow to know)."""

    width: int
    height: int
    alpha: bool | None


def header_info(fh: BinaryIO) -> HeaderInfo | None:
    """The stored size and alpha flag of a PNG, JPEG or WebP file, read from its header only
    (no chunk CRC is checked, nothing decoded); None when it is none of these or the header is
    malformed.

    The alpha flag is whether Pillow's header-only open shows transparency (`masks.image_has_alpha`,
    images.has_transparency): a PNG of colour type 4 (LA) or 6 (RGBA), or a greyscale, RGB or
    palette PNG (type 0, 2, 3) with a tRNS chunk before its image data (a colour key or a
    palette's alpha); a
    WebP whose VP8X flags have the alpha bit, or a lossless (VP8L) one with its alpha-is-used bit
    (a plain lossy VP8 never); a JPEG never.
    """
    head = fh.read(33)
    if head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR" and len(head) >= 26:
        width, height = struct.unpack(">II", head[16:24])
        alpha = _PNG_COLOUR_ALPHA.get(head[25])
        if alpha is None and len(head) == 33:
            alpha = _png_trns(fh)
        return HeaderInfo(width, height, alpha)
    if head[:2] == b"\xff\xd8":
        fh.seek(0)
        try:
            size = walk_jpeg(fh, Path("image"))
        except DatasetError:
            return None
        return None if size is None else HeaderInfo(*size, alpha=False)
    size = webp_size(head)
    if size is None:
        return None
    kind = head[12:16]
    if kind == b"VP8X":
        alpha = bool(head[20] & _WEBP_VP8X_ALPHA)
    elif kind == b"VP8L":
        alpha = bool((int.from_bytes(head[21:25], "little") >> 28) & 1)
    else:
        alpha = False
    return HeaderInfo(*size, alpha=alpha)


def _png_trns(fh: BinaryIO) -> bool | None:
    """Whether a PNG, read up to the end of its IHDR chunk, has a tRNS chunk before its image
    data (png_chunk_before_data, at most _PNG_ALPHA_CHUNKS chunks)."""
    return png_chunk_before_data(fh, b"tRNS", _PNG_ALPHA_CHUNKS)


def png_chunk_before_data(fh: BinaryIO, name: bytes, limit: int) -> bool | None:
    """Whether a PNG, read up to the end of its IHDR chunk, has a chunk `name` before its image
    data (chunks skipped by seeking); None when the header is cut short or has more than `limit`
    chunks before the image data."""
    for _ in range(limit):
        raw = fh.read(8)
        if len(raw) != 8:
            return None
        length, ctype = struct.unpack(">I4s", raw)
        if ctype == name:
            return True
        if ctype in (b"IDAT", b"IEND"):
            return False
        fh.seek(length + 4, io.SEEK_CUR)
    return None


def png_colour_key(fh: BinaryIO) -> bool | None:
    """Whether the file is a grey or RGB PNG (colour type 0 or 2) with a tRNS chunk before its
    image data: a colour key (images.has_transparency), read from its header; False for any other
    file (a palette's tRNS is no colour key); None when the header cannot tell (more than
    _PNG_ALPHA_CHUNKS chunks before the image data, or cut short there)."""
    head = fh.read(33)
    if len(head) < 33 or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR" or head[25] not in (0, 2):
        return False
    return _png_trns(fh)


def header_size(fh: BinaryIO) -> tuple[int, int] | None:
    """The stored (width, height) of a PNG, JPEG or WebP file (before EXIF orientation), read
    from its header only; None when it is none of these or the header is malformed."""
    info = header_info(fh)
    return None if info is None else (info.width, info.height)
