"""data/png_stream.py: a PNG above the decode budget has its pixel stream inflated and measured
without holding its pixels (RELIABILITY 151): whole streams (plain and Adam7-interlaced, every
colour type Pillow writes) pass, as Pillow agrees; a stream cut short, garbled, too long or with
an unknown scanline filter is refused naming the file, and `probe_image(full=True)` takes this
path above `decode_pixels`."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data.images import probe_image
from lorastudio.data.png_stream import _ADAM7, check_png_stream, expected_length
from lorastudio.errors import DatasetError


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, raw: bytes, *, interlace: int = 0, split: int = 0) -> bytes:
    """An RGB 8-bit PNG of the raw (filtered) stream `raw`; `split`: IDAT chunk size (0: one)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, interlace)
    data = zlib.compress(raw)
    step = split or len(data)
    idats = b"".join(_chunk(b"IDAT", data[i : i + step]) for i in range(0, len(data), step))
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + idats + _chunk(b"IEND", b"")


def _adam7_raw(pixels: np.ndarray) -> bytes:
    """The interlaced stream of an RGB image (filter 0 on every scanline of every pass)."""
    out = bytearray()
    for x0, y0, dx, dy in _ADAM7:
        sub = pixels[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            for row in sub:
                out += b"\0" + row.tobytes()
    return bytes(out)


def _check(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "p.png"
    path.write_bytes(data)
    with path.open("rb") as fh:
        check_png_stream(fh, path)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P", "1", "I;16"])
def test_pillow_written_pngs_pass(tmp_path: Path, mode: str) -> None:
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 255, (37, 29, 3), dtype=np.uint8)).convert(mode)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    _check(tmp_path, buf.getvalue())


def test_an_interlaced_png_passes_and_pillow_reads_the_same_pixels(tmp_path: Path) -> None:
    pixels = np.random.default_rng(1).integers(0, 255, (13, 7, 3), dtype=np.uint8)
    raw = _adam7_raw(pixels)
    assert len(raw) == expected_length(7, 13, 2, 8, 1)
    data = _png(7, 13, raw, interlace=1, split=50)
    _check(tmp_path, data)
    with Image.open(io.BytesIO(data)) as img:
        assert np.array_equal(np.asarray(img.convert("RGB")), pixels)


def test_a_stream_cut_short_garbled_or_long_is_refused(tmp_path: Path) -> None:
    row = b"\0" + bytes(3 * 8)
    whole = row * 8
    cases = {
        "cut short": _png(8, 8, whole[: len(row) * 5]),
        "too long": _png(8, 8, whole + row),
        "bad filter": _png(8, 8, row * 3 + b"\x07" + row[1:] + row * 4),
    }
    garbled = bytearray(_png(8, 8, whole))
    at = garbled.find(b"IDAT") + 6
    garbled[at : at + 4] = b"\xff\xff\xff\xff"
    idat_start = garbled.find(b"IDAT")
    length = struct.unpack(">I", garbled[idat_start - 4 : idat_start])[0]
    crc_at = idat_start + 4 + length
    garbled[crc_at : crc_at + 4] = struct.pack(">I", zlib.crc32(bytes(garbled[idat_start:crc_at])))
    cases["garbled"] = bytes(garbled)
    messages = {}
    for what, data in cases.items():
        with pytest.raises(DatasetError) as info:
            _check(tmp_path, data)
        messages[what] = info.value.problems[0]
    assert messages["cut short"].startswith("p.png: corrupt (PNG pixel data cut short: 125 of 200 bytes")
    assert messages["too long"] == "p.png: corrupt (PNG pixel data longer than its 8x8 size)"
    assert messages["bad filter"] == "p.png: corrupt (PNG scanline 3 has filter type 7)"
    assert messages["garbled"].startswith("p.png: corrupt (PNG pixel data does not inflate")
    _check(tmp_path, _png(8, 8, whole))


def test_probe_full_checks_the_stream_above_the_decode_budget(tmp_path: Path) -> None:
    row = b"\0" + bytes(3 * 64)
    (tmp_path / "cut.png").write_bytes(_png(64, 64, row * 40))
    (tmp_path / "ok.png").write_bytes(_png(64, 64, row * 64))
    for budget in (64 * 64, 100):  # decoded by Pillow; inflated and measured
        assert probe_image(tmp_path / "ok.png", 10**8, budget, full=True).width == 64
        with pytest.raises(DatasetError) as info:
            probe_image(tmp_path / "cut.png", 10**8, budget, full=True)
        assert info.value.problems[0].startswith("cut.png: corrupt (")
    assert probe_image(tmp_path / "cut.png", 10**8, 100).width == 64  # the cheap check alone
