"""Header checks before Pillow (data/image_headers.py): stored sizes read from the first bytes
of PNG/JPEG/WebP files, JPEG metadata segments and WebP file sizes capped, and a check decode
skipped above the decode budget."""

from __future__ import annotations

import io
import struct
import tracemalloc
from pathlib import Path

import pytest
from PIL import Image, ImageFile

from lorastudio.data import image_headers
from lorastudio.data.image_headers import MAX_JPEG_HEADER_BYTES, header_size
from lorastudio.data.images import probe_image
from lorastudio.errors import DatasetError


@pytest.mark.parametrize(
    ("name", "mode", "kw"),
    [
        ("a.png", "RGB", {}),
        ("a.jpg", "RGB", {}),
        ("a.jpg", "L", {"progressive": True}),
        ("a.webp", "RGB", {"quality": 80}),  # VP8 (lossy)
        ("b.webp", "RGB", {"lossless": True}),  # VP8L
        ("c.webp", "RGBA", {"quality": 80}),  # VP8X (alpha)
    ],
)
def test_header_size_matches_pillow(tmp_path: Path, name: str, mode: str, kw: dict) -> None:
    path = tmp_path / name
    Image.new(mode, (321, 123)).save(path, **kw)
    with path.open("rb") as fh:
        assert header_size(fh) == (321, 123)


def test_header_size_of_other_bytes_is_none() -> None:
    assert header_size(io.BytesIO(b"GIF89a" + b"\0" * 40)) is None
    assert header_size(io.BytesIO(b"\xff\xd8\xff")) is None  # a JPEG cut short


def _jpeg_with_app_segments(path: Path, count: int) -> Path:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), "red").save(buf, format="JPEG")
    data = buf.getvalue()
    segment = b"\xff\xef" + struct.pack(">H", 65535) + b"\0" * 65533  # APP15, 64 KB
    path.write_bytes(data[:2] + segment * count + data[2:])
    return path


def test_jpeg_metadata_over_the_cap_is_refused_without_holding_it(tmp_path: Path) -> None:
    fine = _jpeg_with_app_segments(tmp_path / "fine.jpg", 4)
    assert probe_image(fine, 10**6).width == 16
    count = MAX_JPEG_HEADER_BYTES // 65533 + 1
    bomb = _jpeg_with_app_segments(tmp_path / "bomb.jpg", count)
    tracemalloc.start()
    with pytest.raises(DatasetError, match="JPEG metadata segments larger than the 16 MB allowed"):
        probe_image(bomb, 10**6)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2**20, f"{peak:,} bytes held"


def test_webp_over_the_file_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.webp"
    Image.new("RGB", (64, 64)).save(path, lossless=True)
    monkeypatch.setattr(image_headers, "MAX_WEBP_BYTES", path.stat().st_size - 1)
    with pytest.raises(DatasetError, match="refused: WebP file of .* bytes is larger than"):
        probe_image(path, 10**6)


def test_no_check_decode_above_the_decode_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[tuple[int, int]] = []
    real = ImageFile.ImageFile.load

    def load(self: ImageFile.ImageFile):  # type: ignore[no-untyped-def]
        loads.append(self.size)
        return real(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    webp = tmp_path / "a.webp"
    Image.new("RGB", (300, 200)).save(webp)
    assert probe_image(webp, 10**6, decode_pixels=4 * 300 * 200).width == 300  # a WebP counts 4x
    assert loads == [(300, 200)]
    assert probe_image(webp, 10**6, decode_pixels=4 * 300 * 200 - 1).width == 300
    assert loads == [(300, 200)]  # over the budget: header checked, not decoded
