"""Hostile images are refused at upload, before their pixels are decoded: truncated files, the
wrong extension, decompression bombs and images over the server's pixel limit. Decoding is
watched by counting calls of Pillow's pixel loader (ImageFile.load) in the server process.
Thumbnails of large images, twelve at once, keep a real server process within 300 MB of idle."""

from __future__ import annotations

import io
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from PIL import Image, ImageFile
from reliability_helpers import record_figure, serve_process

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


# --- thumbnails of large images on a real `lorastudio serve` process -------------------------


def _rgba_png_of_zeros(width: int, height: int) -> bytes:
    """A valid RGBA PNG of width x height transparent black pixels, built without decoding
    anything: a few hundred KB on disk, width*height*4 bytes once decoded."""
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
    packer = zlib.compressobj(9)
    row = b"\x00" * (width * 4 + 1)  # filter byte 0 + the row's pixels
    rows = [packer.compress(row) for _ in range(height)]
    data = b"".join(rows) + packer.flush()
    return b"\x89PNG\r\n\x1a\n" + header + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")


def _big_jpeg(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (width, height), 90).save(buf, format="JPEG", quality=50)
    return buf.getvalue()


def _webp(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (30, 90, 150)).save(buf, format="WEBP", quality=80)
    return buf.getvalue()


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _twelve_at_once(client: httpx.Client, dataset: str, names: list[str]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(names))
    out: dict[str, httpx.Response] = {}

    def get(name: str) -> None:
        barrier.wait()
        out[name] = client.get(f"/api/datasets/{dataset}/thumbnails/{name}", params={"size": 256})

    threads = [threading.Thread(target=get, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return [out[n] for n in names]


@pytest.mark.slow  # memory figure of 12 large decodes
def test_twelve_concurrent_thumbnails_of_large_images_stay_within_300_mb(settings: Settings) -> None:
    """12 concurrent thumbnails of 64-megapixel PNGs (a few hundred KB each), then of 16.7 MP
    RGBA PNGs (decoded: 64 MB each), of 64 MP JPEGs (decoded at 1/8) and of 4.2 MP WebPs (at
    the budget: a WebP counts 4x), on a real server process: its peak RSS (VmHWM) stays under
    idle + 300 MB; a repeat is served from the cache."""
    sets = {
        "bombs": ("png", _rgba_png_of_zeros(8000, 8000)),  # 64,000,000 px: the default image limit
        "big": ("png", _rgba_png_of_zeros(4096, 4096)),  # the default decode budget
        "photos": ("jpg", _big_jpeg(8000, 8000)),
        "webps": ("webp", _webp(2048, 2048)),  # counts 4x: at the decode budget
    }
    names = [f"img{i:02d}" for i in range(12)]
    for dataset, (ext, data) in sets.items():
        folder = settings.datasets_dir / dataset
        folder.mkdir(parents=True)
        for name in names:
            (folder / f"{name}.{ext}").write_bytes(data)
    figures: dict[str, object] = {"png_64mp_file_kb": len(sets["bombs"][1]) // 1024}
    with serve_process(settings, client_timeout=300) as (proc, client):
        idle = _peak_rss_mb(proc.pid)
        first: dict[str, list[httpx.Response]] = {}
        for dataset, (ext, _) in sets.items():
            files = [f"{n}.{ext}" for n in names]
            t0 = time.monotonic()
            responses = first[dataset] = _twelve_at_once(client, dataset, files)
            seconds = time.monotonic() - t0
            assert [r.status_code for r in responses] == [200] * 12, [r.text for r in responses]
            assert all(r.headers["content-type"] == "image/jpeg" for r in responses)
            figures[f"{dataset}_seconds"] = round(seconds, 2)
            figures[f"{dataset}_peak_above_idle_mb"] = round(_peak_rss_mb(proc.pid) - idle, 1)
            placeholders = sum("x-lorastudio-placeholder" in r.headers for r in responses)
            figures[f"{dataset}_placeholders"] = placeholders
            assert placeholders == (12 if dataset == "bombs" else 0)
            if dataset != "bombs":
                sizes = {Image.open(io.BytesIO(r.content)).size for r in responses}
                assert sizes == {(256, 256)}, sizes
        t0 = time.monotonic()
        again = _twelve_at_once(client, "big", [f"{n}.png" for n in names])
        figures["cached_seconds"] = round(time.monotonic() - t0, 3)
        assert [r.content for r in again] == [r.content for r in first["big"]]
        peak = _peak_rss_mb(proc.pid)
    figures.update(server_rss_idle_mb=round(idle, 1), server_peak_rss_mb=round(peak, 1))
    record_figure("thumbnails_12_concurrent", figures)
    assert len(list((settings.home / "cache" / "thumbs").glob("*/*.jpg"))) == 36  # big + photos + webps
    assert peak - idle < 300, figures
