"""Hostile images are refused at upload, before their pixels are decoded: truncated files, the
wrong extension, decompression bombs and images over the server's pixel limit. Decoding is
watched by counting calls of Pillow's pixel loader (ImageFile.load) in the server process."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image, ImageFile

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings


def _png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 10)).save(buf, format="PNG")
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_bomb(side: int) -> bytes:
    """A valid PNG header claiming side x side pixels, with a few KB of highly compressed zeros
    (decoding would need side*side*3 bytes)."""
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
    data = _chunk(b"IDAT", zlib.compress(b"\x00" * (side * 3 + 1) * 64, 9))
    return b"\x89PNG\r\n\x1a\n" + header + data + _chunk(b"IEND", b"")


def _jpeg(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 10, 200)).save(buf, format="JPEG")
    return buf.getvalue()


@pytest.fixture
def client(settings: Settings, shapes: Path) -> Iterator[TestClient]:
    limited = settings.model_copy(update={"max_image_pixels": 512 * 512})
    with TestClient(create_app(limited), base_url=LOOPBACK) as test_client:
        yield test_client


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Sizes of every image whose pixels Pillow loads in this process."""
    seen: list[tuple[int, int]] = []
    real_load = ImageFile.ImageFile.load

    def load(self: ImageFile.ImageFile):  # type: ignore[no-untyped-def]
        seen.append(self.size)
        return real_load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)
    return seen


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("bomb.png", _png_bomb(60_000), "oversized"),
        ("big.png", _png(600, 600), "oversized"),
        ("big.jpg", _jpeg(1024, 300), "oversized"),
        ("truncated.png", _png(64, 64)[:-40], "corrupt"),
        ("truncated.jpg", _jpeg(64, 64)[:200], "corrupt"),
        ("text.png", b"this is not an image", "not a PNG/JPEG/WebP"),
        ("gif.png", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "not a PNG/JPEG/WebP"),
        ("empty.webp", b"", "not a PNG/JPEG/WebP"),
    ],
)
def test_hostile_images_are_refused_before_decoding(
    client: TestClient, settings: Settings, decodes: list, name: str, data: bytes, reason: str
) -> None:
    before = sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir())
    resp = client.post("/api/datasets/shapes/files", files=[("files", (name, data))])
    assert resp.status_code == 400
    assert any(p.startswith(name) and reason in p for p in resp.json()["problems"]), resp.json()
    assert sorted(p.name for p in (settings.datasets_dir / "shapes").iterdir()) == before
    if reason == "oversized":
        assert decodes == [], "an oversized image was decoded"
    assert all(w * h <= 512 * 512 for w, h in decodes)


def test_a_wrong_extension_is_judged_by_content(client: TestClient, settings: Settings) -> None:
    """A JPEG named .png is a real image of an allowed kind (accepted and readable); a PNG named
    .txt is not a caption (refused as not UTF-8 text)."""
    ok = client.post("/api/datasets/shapes/files", files=[("files", ("jpeg_inside.png", _jpeg(32, 32)))])
    assert ok.status_code == 201, ok.text
    thumb = client.get("/api/datasets/shapes/thumbnails/jpeg_inside.png", params={"size": 16})
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    bad = client.post("/api/datasets/shapes/files", files=[("files", ("red_circle.txt", _png(8, 8)))])
    assert bad.status_code == 400 and "red_circle.txt" in str(bad.json()["problems"])
