"""Check a PNG's compressed pixel stream without holding its pixels (no Pillow).

An image above the server's decode budget (settings.max_decode_pixels) is not decoded by the
server, yet its pixel data should still be known to be whole before a run loads models: here its
IDAT chunks are inflated piece by piece (zlib, a bounded window of output at a time) and the
inflated length compared with what the header's size, colour type, bit depth and interlace
method need, with each scanline's filter type (0-4) checked on a non-interlaced image. A stream
cut short, garbled (zlib's own Adler-32 check), too long or with data after its end is refused.
What is not checked: the pixel values themselves (any bytes are valid pixels once filtered).

The chunk layout follows the PNG specification (ISO/IEC 15948); chunk CRCs were already
checked by image_headers.walk_png.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from lorastudio.data.image_headers import PNG_SIGNATURE, bad_image

_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # samples per pixel by colour type
_READ_PIECE = 1 << 20
_OUT_PIECE = 1 << 22  # most inflated bytes held at once
# Adam7 passes: (x start, y start, x step, y step)
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _row_bytes(width: int, bits: int) -> int:
    return 1 + (width * bits + 7) // 8  # a filter-type byte, then the packed samples


def expected_length(width: int, height: int, colour: int, depth: int, interlace: int) -> int:
    """Inflated bytes of a PNG's pixel stream for its IHDR fields (each scanline's filter byte
    included; an interlaced image's seven passes, an empty pass having no scanlines)."""
    bits = _CHANNELS[colour] * depth
    if not interlace:
        return height * _row_bytes(width, bits)
    total = 0
    for x0, y0, dx, dy in _ADAM7:
        pw, ph = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if pw > 0 and ph > 0:
            total += ph * _row_bytes(pw, bits)
    return total


def check_png_stream(fh: BinaryIO, path: Path) -> None:
    """Inflate the IDAT stream of the PNG `fh` (open at its start) and check its length.

    Raises: DatasetError naming `path` ("corrupt (...)") when the stream does not inflate, ends
    early, runs long, or (non-interlaced) a scanline has an unknown filter type."""
    if fh.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
        raise bad_image(path, "corrupt (not a PNG file)")
    width = height = colour = depth = interlace = 0
    inflater = zlib.decompressobj()
    done = 0  # inflated bytes so far
    need = row = 0
    while True:
        head = fh.read(8)
        if len(head) != 8:
            raise bad_image(path, "corrupt (truncated PNG file)")
        length, ctype = struct.unpack(">I4s", head)
        if ctype == b"IHDR":
            width, height, depth, colour, _c, _f, interlace = struct.unpack(">IIBBBBB", fh.read(13))
            fh.seek(length - 13 + 4, 1)
            if colour not in _CHANNELS:
                raise bad_image(path, f"corrupt (PNG colour type {colour})")
            need = expected_length(width, height, colour, depth, interlace)
            row = 0 if interlace else _row_bytes(width, _CHANNELS[colour] * depth)
            continue
        if ctype == b"IEND":
            break
        if ctype != b"IDAT":
            fh.seek(length + 4, 1)
            continue
        left = length
        while left:
            piece = fh.read(min(left, _READ_PIECE))
            if not piece:
                raise bad_image(path, "corrupt (truncated PNG file)")
            left -= len(piece)
            data = piece
            while data:
                try:
                    out = inflater.decompress(data, _OUT_PIECE)
                except zlib.error as err:
                    raise bad_image(path, f"corrupt (PNG pixel data does not inflate: {err})") from None
                if row:
                    _check_filters(out, done, row, path)
                done += len(out)
                if done > need:
                    raise bad_image(path, f"corrupt (PNG pixel data longer than its {width}x{height} size)")
                data = inflater.unconsumed_tail
        fh.seek(4, 1)  # CRC: checked by walk_png
    if not inflater.eof or done < need:
        raise bad_image(
            path,
            f"corrupt (PNG pixel data cut short: {done:,} of {need:,} bytes; the file is truncated or damaged)",
        )


def _check_filters(out: bytes, offset: int, row: int, path: Path) -> None:
    """Each scanline's first byte (at stream offsets k*row) must be a filter type 0-4."""
    first = (-offset) % row
    filters = np.frombuffer(out, dtype=np.uint8)[first::row]  # one byte per scanline: vectorised
    bad = np.flatnonzero(filters > 4)
    if bad.size:
        i = first + int(bad[0]) * row
        raise bad_image(path, f"corrupt (PNG scanline {(offset + i) // row} has filter type {out[i]})")
