"""Thumbnails: decoded reduced and within the decode budget, every image mode, EXIF-upright,
cached on disk by file version; decodes run on two threads and a request that cannot get one
in time is DecodeBusy."""

from __future__ import annotations

import errno
import io
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data import thumbnails
from lorastudio.data.decode_slots import DECODE_SLOTS, DecodeBusy, run_decode
from lorastudio.data.orientation import EXIF_ORIENTATION_TAG
from lorastudio.data.thumbnails import (
    TooLargeToPreview,
    _reduced,
    prune_cache,
    render_thumbnail,
    thumbnail_jpeg,
)
from lorastudio.errors import DatasetError

BIG = 64_000_000


def _save(path: Path, img: Image.Image, **kw: object) -> Path:
    img.save(path, **kw)
    return path


def _decode(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def _mean(img: Image.Image) -> tuple[float, ...]:
    return tuple(np.asarray(img.convert("RGB"), dtype=np.float64).reshape(-1, 3).mean(axis=0))


@pytest.mark.parametrize(
    ("mode", "color", "expected"),
    [
        ("RGB", (200, 30, 30), (200, 30, 30)),
        ("RGBA", (0, 0, 0, 0), (255, 255, 255)),  # transparency composited onto white
        ("LA", (40, 255), (40, 40, 40)),
        ("L", 90, (90, 90, 90)),
        ("1", 1, (255, 255, 255)),
        ("I;16", 65535, (255, 255, 255)),
    ],
)
def test_every_png_mode_gives_an_rgb_jpeg_of_the_asked_size(
    tmp_path: Path, mode: str, color: object, expected: tuple[int, ...]
) -> None:
    path = _save(tmp_path / "a.png", Image.new(mode, (640, 320), color))  # type: ignore[arg-type]
    thumb = _decode(render_thumbnail(path, 64, max_pixels=BIG, decode_pixels=BIG))
    assert thumb.format == "JPEG" and thumb.mode == "RGB" and thumb.size == (64, 32)
    assert np.allclose(_mean(thumb), expected, atol=3)


def test_a_palette_png_with_transparency(tmp_path: Path) -> None:
    img = Image.new("P", (300, 300), 1)
    img.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)
    path = _save(tmp_path / "p.png", img, transparency=0)
    assert np.allclose(
        _mean(_decode(render_thumbnail(path, 30, max_pixels=BIG, decode_pixels=BIG))), (0, 200, 0), atol=3
    )


def test_rgba_is_reduced_in_bands_exactly_as_a_whole_reduce(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (1030, 2050, 4), dtype=np.uint8)
    pixels[..., 3] = 255  # opaque: Pillow's premultiplied reduce equals a plain box reduce
    img = Image.fromarray(pixels, "RGBA")
    ours = _reduced(img, 64)  # factor 2050 // 128 = 16; bands of rows, the last one partial
    assert ours.size == img.reduce(16).size == (129, 65)
    assert np.array_equal(np.asarray(ours), np.asarray(img.reduce(16)))


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[EXIF_ORIENTATION_TAG] = 6  # stored landscape, shown portrait
    path = _save(tmp_path / "r.jpg", Image.new("RGB", (400, 200), "blue"), exif=exif)
    assert _decode(render_thumbnail(path, 100, max_pixels=BIG, decode_pixels=BIG)).size == (50, 100)


def test_the_decode_budget_refuses_png_and_webp_but_reduces_jpeg(tmp_path: Path) -> None:
    png = _save(tmp_path / "a.png", Image.new("RGB", (300, 200)))
    webp = _save(tmp_path / "a.webp", Image.new("RGB", (300, 200)))
    jpeg = _save(tmp_path / "a.jpg", Image.new("RGB", (3000, 2000)))
    for path, cost in ((png, 1), (webp, 4)):  # a WebP decode holds ~4x the memory
        with pytest.raises(TooLargeToPreview, match=r"300x200 .* larger than the server decodes"):
            render_thumbnail(path, 32, max_pixels=BIG, decode_pixels=300 * 200 * cost - 1)
        assert _decode(render_thumbnail(path, 32, max_pixels=BIG, decode_pixels=300 * 200 * cost)).size == (
            32,
            21,
        )
    # 3000x2000 = 6 MP over a 200,000 px budget, but drafted at 1/8 (375x250) it fits
    thumb = render_thumbnail(jpeg, 32, max_pixels=BIG, decode_pixels=200_000)
    assert _decode(thumb).size == (32, 21)
    with pytest.raises(DatasetError, match="oversized"):
        render_thumbnail(jpeg, 32, max_pixels=1_000_000, decode_pixels=BIG)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_cache_that_cannot_keep_a_thumbnail_still_serves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    """A full or read-only home cache: the thumbnail was a 507 / 500 (RELIABILITY 1074); now it is
    served uncached, nothing staged left, the reason logged once."""
    cache = tmp_path / "cache"
    path = _save(tmp_path / "a.png", Image.new("RGB", (100, 100), "red"))

    def refused(src: object, dst: object) -> None:  # the staging's rename into the cache
        raise OSError(code, os.strerror(code), os.fsdecode(dst))

    monkeypatch.setattr(thumbnails.os, "replace", refused)
    monkeypatch.setattr(thumbnails, "_told", set())
    for _ in range(2):
        assert _decode(thumbnail_jpeg(path, 32, cache_dir=cache, max_pixels=BIG, decode_pixels=BIG)).size == (
            32,
            32,
        )
    assert not [p for p in cache.rglob("*") if p.is_file()]  # nothing kept, no staging left
    assert caplog.text.count("thumbnails are not cached") == 1 and os.strerror(code) in caplog.text


def test_thumbnails_are_cached_by_file_version(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = _save(tmp_path / "a.png", Image.new("RGB", (100, 100), "red"))
    first = thumbnail_jpeg(path, 32, cache_dir=cache, max_pixels=BIG, decode_pixels=BIG)
    stored = list(cache.glob("*/*.jpg"))
    assert len(stored) == 1 and stored[0].read_bytes() == first
    assert not [p for p in cache.rglob("*") if p.name.startswith(".")]  # no staging file left
    stored[0].write_bytes(b"from the cache")
    assert thumbnail_jpeg(path, 32, cache_dir=cache, max_pixels=BIG, decode_pixels=BIG) == b"from the cache"
    _save(path, Image.new("RGB", (100, 100), "green"))
    os.utime(path, ns=(1, 1))  # a new version of the file: a new key
    fresh = thumbnail_jpeg(path, 32, cache_dir=cache, max_pixels=BIG, decode_pixels=BIG)
    assert np.allclose(_mean(_decode(fresh)), (0, 128, 0), atol=4)
    assert len(list(cache.glob("*/*.jpg"))) == 2
    assert prune_cache(cache, keep=1) == 1 and len(list(cache.glob("*/*.jpg"))) == 1


def test_a_decode_that_cannot_start_in_time_is_busy() -> None:
    release = threading.Event()
    running = threading.Barrier(DECODE_SLOTS + 1)

    def hold() -> None:
        running.wait(5)
        release.wait(10)

    holders = [threading.Thread(target=run_decode, args=(hold,)) for _ in range(DECODE_SLOTS)]
    for t in holders:
        t.start()
    running.wait(5)  # every decode thread is busy
    try:
        with pytest.raises(DecodeBusy, match="retry in"):
            run_decode(lambda: "never", wait_s=0.2)
    finally:
        release.set()
        for t in holders:
            t.join(10)
    assert run_decode(lambda: "ran", wait_s=5) == "ran"


def test_the_cache_prunes_by_write_order_not_the_wall_clock(tmp_path: Path) -> None:
    """RELIABILITY 932: thumbnails written after a clock was set back an hour (mtimes an hour
    older than the ones before) are not the first pruned: this process's writes go in the order
    it made them, an earlier process's files (by mtime) before them."""
    cache = tmp_path / "thumbs"
    earlier = cache / "00" / "earlier.jpg"  # an earlier process's
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"x")
    images = []
    for i, colour in enumerate(((255, 0, 0), (0, 255, 0), (0, 0, 255))):
        images.append(_save(tmp_path / f"{i}.png", Image.new("RGB", (40, 40), colour)))
    made = []
    for path in images:
        thumbnail_jpeg(path, 32, cache_dir=cache, max_pixels=BIG, decode_pixels=BIG)
        made.append(next(p for p in cache.glob("*/*.jpg") if p not in made and p != earlier))
    now = made[0].stat().st_mtime
    os.utime(earlier, (now - 60, now - 60))
    for p in made[1:]:  # the clock set back an hour after the first write
        os.utime(p, (now - 3600, now - 3600))
    assert prune_cache(cache, keep=2) == 2
    assert sorted(cache.glob("*/*.jpg")) == sorted(made[1:])  # the earlier one and the first write went
