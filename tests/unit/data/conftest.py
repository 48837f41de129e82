"""Helpers for the data tests: write small real image files with Pillow."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ImageMaker = Callable[..., Path]


def write_image(
    path: Path,
    size: tuple[int, int] = (64, 48),
    *,
    seed: int = 0,
    pixels: np.ndarray | None = None,
    orientation: int | None = None,
    mode: str = "RGB",
) -> Path:
    """Write a random-noise (or given [H, W, C] uint8) image; format from the extension.

    mode: "RGB", "RGBA" or "L" (the channel count of the noise)."""
    if pixels is None:
        rng = np.random.default_rng(seed)
        channels = len(mode)
        pixels = rng.integers(0, 256, size=(size[1], size[0], channels), dtype=np.uint8)  # [H, W, C]
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]  # [H, W] grayscale
    img = Image.fromarray(pixels)
    kwargs: dict[str, object] = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    ext = path.suffix.lower()
    if ext in (".jpg", ".jpeg"):
        kwargs["quality"] = 95
    if ext == ".webp":
        kwargs["lossless"] = True
    img.save(path, **kwargs)
    return path


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims width x height but holds one tiny IDAT (a decompression bomb
    shape: huge by header, tiny on disk)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
    path.write_bytes(data + chunk(b"IEND", b""))
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (recursively) -> its bytes, to prove nothing was written."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def make_image() -> ImageMaker:
    return write_image


@pytest.fixture
def dir_snapshot() -> Callable[[Path], dict[str, bytes]]:
    return snapshot


@pytest.fixture
def header_only_png() -> Callable[[Path, int, int], Path]:
    return png_header_only
