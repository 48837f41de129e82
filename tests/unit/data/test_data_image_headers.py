"""Header checks before Pillow (data/image_headers.py): stored sizes read from the first bytes
of PNG/JPEG/WebP files, JPEG metadata segments and WebP file sizes capped, and a check decode
skipped above the decode budget."""

from __future__ import annotations

import io
import struct
import tracemalloc
from pathlib import Path

import pytest
from PIL import Image, ImageFile, PngImagePlugin

from lorastudio.data import image_headers
from lorastudio.data.image_headers import MAX_JPEG_HEADER_BYTES, header_info, header_size
from lorastudio.data.images import open_image, probe_image
from lorastudio.data.masks import image_has_alpha
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


def _save(path: Path, img: Image.Image, **kw: object) -> Path:
    img.save(path, **kw)
    return path


def _alpha_cases(tmp: Path) -> list[tuple[Path, bool]]:
    """(file, whether it shows transparency: an alpha channel, a palette's or a colour key) of
    every PNG colour type, WebP kind and JPEG."""
    half = Image.new("RGBA", (40, 30), (255, 0, 0, 255))
    half.paste((0, 0, 0, 0), (0, 0, 20, 30))  # the left half transparent
    palette = Image.new("P", (40, 30), 1)
    palette.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    palette.paste(0, (0, 0, 20, 30))  # index 0: transparent with its tRNS
    big_text = PngImagePlugin.PngInfo()
    big_text.add_text("comment", "x" * 100_000)  # a large chunk before the palette's tRNS
    return [
        (_save(tmp / "rgba.png", half), True),
        (_save(tmp / "la.png", half.convert("LA")), True),
        (_save(tmp / "p_trns.png", palette, transparency=0), True),
        (_save(tmp / "p_trns_text.png", palette, transparency=0, pnginfo=big_text), True),
        (_save(tmp / "p.png", palette), False),
        (_save(tmp / "rgb.png", half.convert("RGB")), False),
        # a colour key (tRNS) is transparency as viewers show it (RELIABILITY 553)
        (_save(tmp / "rgb_trns.png", half.convert("RGB"), transparency=(0, 0, 0)), True),
        (_save(tmp / "l_trns.png", half.convert("L"), transparency=0), True),
        (_save(tmp / "l16.png", Image.new("I;16", (40, 30), 300)), False),
        (_save(tmp / "lossy.webp", half.convert("RGB"), quality=80), False),  # VP8
        (_save(tmp / "lossy_alpha.webp", half, quality=80), True),  # VP8X + ALPH
        (_save(tmp / "lossless.webp", half.convert("RGB"), lossless=True), False),  # VP8L
        (_save(tmp / "lossless_alpha.webp", half, lossless=True), True),  # VP8L, alpha used
        (_save(tmp / "lossless_opaque.webp", half.convert("RGB").convert("RGBA"), lossless=True), False),
        (_save(tmp / "exif.webp", half, quality=80, exif=b"Exif\0\0MM\0*\0\0\0\x08\0\0"), True),  # VP8X
        (_save(tmp / "a.jpg", half.convert("RGB")), False),
    ]


def test_header_alpha_agrees_with_pillow(tmp_path: Path) -> None:
    """The listing's alpha flag, read from the header alone, is what Pillow opens (the flag
    alpha_mask trains from) and what decoding the file shows, for every PNG colour type, WebP
    kind and JPEG."""
    for path, expected in _alpha_cases(tmp_path):
        with path.open("rb") as fh:
            info = header_info(fh)
        assert info is not None and (info.width, info.height) == (40, 30), path.name
        with open_image(path) as img:
            pillow = image_has_alpha(img)
            decoded = img.convert("RGBA").getchannel("A").getextrema()
        assert info.alpha is pillow is expected, path.name
        if expected:
            assert decoded == (0, 255), path.name  # decoded: the transparent half is there


def test_header_alpha_cannot_tell_is_none(tmp_path: Path) -> None:
    """A palette PNG cut short before its image data, or with more chunks before it than are
    walked: the header cannot tell (None: the listing asks Pillow)."""
    palette = Image.new("P", (8, 8), 0)
    buf = io.BytesIO()
    palette.save(buf, format="PNG")
    data = buf.getvalue()
    assert header_info(io.BytesIO(data)).alpha is False
    assert header_info(io.BytesIO(data[:40])).alpha is None
    chunk = struct.pack(">I4s", 0, b"teXt") + b"\0\0\0\0"
    many = data[:33] + chunk * (image_headers._PNG_ALPHA_CHUNKS + 1) + data[33:]
    assert header_info(io.BytesIO(many)).alpha is None
