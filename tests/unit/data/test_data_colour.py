"""Embedded ICC profiles: images train (and preview) in sRGB, converted from their profile, or are
refused saying why (data/colour.py)."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from lorastudio.data.images import load_rgb, probe_image
from lorastudio.data.thumbnails import render_thumbnail
from lorastudio.errors import DatasetError

MAX_PIXELS = 4096 * 4096
# Colorants of the spaces, adapted to D50 as ICC profiles hold them (X, Y, Z of red, green, blue).
ADOBE_RGB = ((0.60974, 0.31111, 0.01947), (0.20528, 0.62567, 0.06087), (0.14919, 0.06322, 0.74457))
DISPLAY_P3 = ((0.51512, 0.24120, -0.00105), (0.29198, 0.69225, 0.04189), (0.15710, 0.06657, 0.78407))


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def icc_profile(colorants: tuple | None, gamma: float, space: bytes = b"RGB ") -> bytes:
    """A minimal ICC v2 display profile: RGB (matrix + one gamma curve) or, with colorants None,
    grey (one gamma curve)."""

    def xyz(x: float, y: float, z: float) -> bytes:
        return b"XYZ \0\0\0\0" + _s15(x) + _s15(y) + _s15(z)

    curve = b"curv\0\0\0\0" + struct.pack(">IH", 1, round(gamma * 256)) + b"\0\0"
    desc = b"desc\0\0\0\0" + struct.pack(">I", 5) + b"test\0" + b"\0" * 81
    tags = [(b"desc", desc), (b"wtpt", xyz(0.9642, 1.0, 0.8249)), (b"cprt", b"text\0\0\0\0none\0")]
    if colorants is None:
        tags.append((b"kTRC", curve))
    else:
        tags += [(tag, xyz(*c)) for tag, c in zip((b"rXYZ", b"gXYZ", b"bXYZ"), colorants, strict=True)]
        tags += [(tag, curve) for tag in (b"rTRC", b"gTRC", b"bTRC")]
    start = 128 + 4 + 12 * len(tags)
    table, data = b"", b""
    for sig, body in tags:
        body += b"\0" * (-len(body) % 4)
        table += sig + struct.pack(">II", start + len(data), len(body))
        data += body
    header = (
        struct.pack(">I", start + len(data))
        + b"lcms\x02\x10\0\0mntr"
        + space
        + b"XYZ "
        + b"\0" * 12
        + b"acsp"
        + b"\0" * 28  # platform, flags, manufacturer, model, attributes, intent
        + _s15(0.9642)
        + _s15(1.0)
        + _s15(0.8249)
        + b"\0" * 48
    )
    return header + struct.pack(">I", len(tags)) + table + data


def _pixels(mode: str = "RGB") -> np.ndarray:
    """Four flat quadrants of mid, saturated colours (a gamut change moves each visibly)."""
    arr = np.zeros((32, 48, 4), np.uint8)  # [H, W, RGBA]
    arr[:16, :24] = (180, 120, 60, 255)
    arr[:16, 24:] = (40, 160, 90, 255)
    arr[16:, :24] = (70, 80, 200, 128)
    arr[16:, 24:] = (128, 128, 128, 0)
    return arr[..., : len(mode)] if mode != "L" else arr[..., 1]


def _expected(path: Path) -> np.ndarray:
    """The image converted by littleCMS from its own profile to sRGB, alpha onto white."""
    with Image.open(path) as img:
        img.load()
        src = ImageCms.ImageCmsProfile(io.BytesIO(img.info["icc_profile"]))
        base = img.convert("L" if img.mode in ("L", "LA") else "RGB")
        out = ImageCms.profileToProfile(base, src, ImageCms.createProfile("sRGB"), outputMode="RGB")
        rgb = np.asarray(out, dtype=np.float64)  # [H, W, 3]
        if img.mode in ("RGBA", "LA"):
            alpha = np.asarray(img.getchannel("A"), dtype=np.float64)[..., None] / 255.0  # [H, W, 1]
            rgb = rgb * alpha + 255.0 * (1.0 - alpha)
    return rgb


@pytest.mark.parametrize(
    ("name", "colorants", "gamma", "mode"),
    [
        ("adobe.jpg", ADOBE_RGB, 2.2, "RGB"),
        ("p3.png", DISPLAY_P3, 2.4, "RGB"),
        ("p3-alpha.png", DISPLAY_P3, 2.4, "RGBA"),
        ("adobe.webp", ADOBE_RGB, 2.2, "RGB"),
        ("grey-gamma.png", None, 1.8, "L"),
    ],
)
def test_an_image_with_a_colour_profile_trains_and_previews_in_srgb(
    tmp_path: Path, name: str, colorants: tuple | None, gamma: float, mode: str
) -> None:
    path = tmp_path / name
    icc = icc_profile(colorants, gamma, b"RGB " if colorants else b"GRAY")
    kwargs = (
        {"quality": 95} if name.endswith(".jpg") else {"lossless": True} if name.endswith(".webp") else {}
    )
    Image.fromarray(_pixels(mode)).save(path, icc_profile=icc, **kwargs)
    assert probe_image(path, MAX_PIXELS).width == 48

    trained = np.asarray(load_rgb(path), dtype=np.float64)  # [H, W, 3]
    expected = _expected(path)
    assert np.abs(trained - expected).max() <= 1.0
    raw = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64)
    assert np.abs(trained - raw).max() >= 8  # the profile moved the colours: not read as sRGB

    thumb = Image.open(
        io.BytesIO(render_thumbnail(path, 48, max_pixels=MAX_PIXELS, decode_pixels=MAX_PIXELS))
    )
    shown = np.asarray(thumb.convert("RGB"), dtype=np.float64)  # [H, W, 3] (JPEG)
    assert shown.shape == trained.shape
    inner = (slice(4, 12), slice(4, 20))  # inside one quadrant, away from JPEG edges
    assert np.abs(shown[inner].mean((0, 1)) - trained[inner].mean((0, 1))).max() <= 3


def test_an_srgb_profile_leaves_the_colours_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "srgb.png"
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.fromarray(_pixels()).save(path, icc_profile=srgb)
    trained = np.asarray(load_rgb(path), dtype=np.int16)
    assert np.abs(trained - _pixels().astype(np.int16)).max() <= 1


@pytest.mark.parametrize(
    ("profile", "mode", "reason"),
    [
        (b"not a profile at all" * 8, "RGB", "cannot be read"),
        (icc_profile(ADOBE_RGB, 2.2), "L", "is for RGB colours but the image is L"),
        (icc_profile(None, 2.2, b"GRAY"), "RGB", "is for GRAY colours but the image is RGB"),
    ],
)
def test_a_profile_that_cannot_convert_the_image_is_refused_saying_why(
    tmp_path: Path, profile: bytes, mode: str, reason: str
) -> None:
    path = tmp_path / "odd.png"
    Image.fromarray(_pixels(mode)).save(path, icc_profile=profile)
    for read in (lambda: probe_image(path, MAX_PIXELS), lambda: load_rgb(path)):
        with pytest.raises(DatasetError) as err:
            read()
        (problem,) = err.value.problems
        assert problem.startswith("odd.png: its embedded ICC colour profile")
        assert reason in problem
    assert "save it again as sRGB" in str(
        pytest.raises(DatasetError, probe_image, path, MAX_PIXELS).value.problems
    )
