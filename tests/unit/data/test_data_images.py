"""PNG chunk walk in data/images.py: CRCs checked in bounded memory, huge ancillary chunks
refused, private chunks hidden from Pillow, used metadata (eXIf) still read."""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from lorastudio.data.image_headers import MAX_PNG_ANCILLARY_CHUNK_BYTES
from lorastudio.data.images import load_rgb, probe_image
from lorastudio.errors import DatasetError

MAX_PIXELS = 4096 * 4096


def _chunk(tag: bytes, data: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(tag + data) if crc is None else crc
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)


def _insert_after_ihdr(png: Path, out: Path, extra: list[bytes]) -> Path:
    """Copy `png` with the given raw chunks placed right after IHDR (8 + 25 bytes)."""
    data = png.read_bytes()
    with out.open("wb") as fh:
        fh.write(data[:33])
        for piece in extra:
            fh.write(piece)
        fh.write(data[33:])
    return out


def test_private_chunks_are_checked_without_holding_them(tmp_path: Path, make_image) -> None:
    src = make_image(tmp_path / "src.png", size=(32, 24), seed=3)
    blob = bytes(range(256)) * 4096  # 1 MB
    big = _insert_after_ihdr(src, tmp_path / "big.png", [_chunk(b"zzZz", blob) for _ in range(24)])
    assert big.stat().st_size > 24 * 2**20

    tracemalloc.start()
    try:
        info = probe_image(big, MAX_PIXELS)
        pixels = np.asarray(load_rgb(big))  # [H, W, 3]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert (info.width, info.height) == (32, 24)
    np.testing.assert_array_equal(pixels, np.asarray(load_rgb(src)))
    # Pillow alone kept all 24 MB (private_chunks) and verify() read each chunk whole.
    assert peak < 6 * 2**20, f"peak Python allocation {peak / 2**20:.1f} MB"


def test_huge_ancillary_chunk_is_refused_with_a_reason(tmp_path: Path, make_image) -> None:
    src = make_image(tmp_path / "src.png", size=(16, 16))
    huge = b"\x00" * (MAX_PNG_ANCILLARY_CHUNK_BYTES + 1)
    bad = _insert_after_ihdr(src, tmp_path / "huge.png", [_chunk(b"tEXt", huge)])
    with pytest.raises(DatasetError) as err:
        probe_image(bad, MAX_PIXELS)
    (problem,) = err.value.problems
    assert problem.startswith("huge.png: refused: ancillary PNG chunk tEXt")
    assert "16 MB" in problem


@pytest.mark.parametrize(
    ("tag", "reason"),
    [(b"zzZz", "bad CRC in PNG chunk zzZz"), (b"tEXt", "bad CRC in PNG chunk tEXt")],
)
def test_bad_crc_in_any_chunk_is_corrupt(tmp_path: Path, make_image, tag: bytes, reason: str) -> None:
    src = make_image(tmp_path / "src.png", size=(16, 16))
    bad = _insert_after_ihdr(src, tmp_path / "crc.png", [_chunk(tag, b"key\x00value", crc=1234)])
    with pytest.raises(DatasetError) as err:
        probe_image(bad, MAX_PIXELS)
    assert reason in err.value.problems[0]
    with pytest.raises(DatasetError):
        load_rgb(bad)


def test_bad_crc_in_image_data_is_corrupt(tmp_path: Path, make_image) -> None:
    src = make_image(tmp_path / "src.png", size=(16, 16))
    data = bytearray(src.read_bytes())
    data[-13] ^= 0xFF  # last byte of the IDAT CRC (IEND is the last 12 bytes)
    bad = tmp_path / "idat.png"
    bad.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="cannot use image idat.png") as err:
        probe_image(bad, MAX_PIXELS)
    assert "bad CRC in PNG chunk IDAT" in err.value.problems[0]


@pytest.mark.parametrize("cut", [5, 12, 40])
def test_truncated_png_is_corrupt(tmp_path: Path, make_image, cut: int) -> None:
    src = make_image(tmp_path / "src.png", size=(16, 16))
    bad = tmp_path / "cut.png"
    bad.write_bytes(src.read_bytes()[:-cut])
    with pytest.raises(DatasetError) as err:
        probe_image(bad, MAX_PIXELS)
    assert "corrupt (truncated PNG file" in err.value.problems[0]


def test_png_must_start_with_ihdr(tmp_path: Path, make_image) -> None:
    src = make_image(tmp_path / "src.png", size=(16, 16))
    data = src.read_bytes()
    bad = tmp_path / "order.png"
    bad.write_bytes(data[:8] + _chunk(b"tEXt", b"a\x00b") + data[8:])
    with pytest.raises(DatasetError) as err:
        probe_image(bad, MAX_PIXELS)
    assert "not IHDR" in err.value.problems[0]


def test_exif_orientation_survives_hidden_private_chunks(tmp_path: Path, make_image) -> None:
    src = make_image(tmp_path / "src.png", size=(40, 20), orientation=6)
    mixed = _insert_after_ihdr(src, tmp_path / "mixed.png", [_chunk(b"prIv", b"\x01" * 1000)])
    info = probe_image(mixed, MAX_PIXELS)
    assert (info.width, info.height, info.orientation) == (20, 40, 6)
    assert load_rgb(mixed).size == (20, 40)
    np.testing.assert_array_equal(np.asarray(load_rgb(mixed)), np.asarray(load_rgb(src)))


@pytest.mark.parametrize(("side", "max_pixels"), [(600, 100_000), (60_000, MAX_PIXELS)])
def test_an_oversized_image_names_its_size_the_limit_and_the_setting(
    tmp_path: Path, make_image, side, max_pixels
):
    """Over the studio's limit, or over Pillow's decompression-bomb limit (a 60000² header): the
    same answer, in the studio's words, naming the setting that raises the limit."""
    from tests.unit.data.conftest import png_header_only

    path = png_header_only(tmp_path / "big.png", side, side) if side > 10_000 else tmp_path / "big.png"
    if side <= 10_000:
        make_image(path, size=(side, side))
    with pytest.raises(DatasetError) as err:
        probe_image(path, max_pixels)
    (problem,) = err.value.problems
    assert problem == (
        f"big.png: oversized ({side}x{side} = {side * side:,} pixels > limit {max_pixels:,}: "
        "LORASTUDIO_MAX_IMAGE_PIXELS)"
    )


def test_the_image_limit_cannot_be_set_above_what_pillow_opens() -> None:
    from PIL import Image
    from pydantic import ValidationError

    from lorastudio.settings import PILLOW_MAX_PIXELS, Settings

    assert PILLOW_MAX_PIXELS == 2 * Image.MAX_IMAGE_PIXELS  # where Pillow's open raises
    assert Settings(max_image_pixels=PILLOW_MAX_PIXELS).max_image_pixels == PILLOW_MAX_PIXELS
    with pytest.raises(ValidationError, match="max_image_pixels"):
        Settings(max_image_pixels=PILLOW_MAX_PIXELS + 1)
