"""What a run trains on is what an image viewer shows (session 27 data audit): every kind of file a
user brings is decoded by data.images.load_rgb (the training decode) and, through data.crop.load_crop,
into the training tensor, and compared with a reference rendering computed here from the file's
stored values with numpy (not with the conversion under test): untagged CMYK and YCCK JPEGs by the
viewers' formula, 16-bit PNGs from their raw samples, palette / grey / RGB alpha composited onto
white, every EXIF orientation, progressive JPEG. Files no viewer shows as one still image are
refused naming why (animated, GIF, truncated, a decompression bomb). ICC profiles:
test_data_colour.py (converted to sRGB)."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tests.unit.data.conftest import png_header_only

from lorastudio.data import load_crop, scan_dataset
from lorastudio.data.images import load_rgb, probe_image
from lorastudio.errors import DatasetError

YS, XS = np.mgrid[0:24, 0:40]
GRADIENT = np.stack([XS * 6, YS * 10, (XS + YS) * 3], -1).clip(0, 255).astype(np.uint8)  # [24, 40, 3]
ALPHA = (XS * 6).clip(0, 255).astype(np.uint8)  # [24, 40]: transparent on the left


def _on_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """[H, W, 3] float: `rgb` composited onto white by `alpha` (0..255), as the reference."""
    a = alpha.astype(np.float64)[..., None] / 255.0
    return rgb.astype(np.float64) * a + 255.0 * (1.0 - a)


def _cmyk_reference(path: Path) -> np.ndarray:
    """The viewers' rendering of an untagged CMYK JPEG from its decoded ink values (Pillow's CMYK
    samples are ink amounts, 0 = none): R = (255 - C)(255 - K) / 255, and so on."""
    with Image.open(path) as img:
        assert img.mode == "CMYK"
        ink = np.asarray(img).astype(np.float64)  # [H, W, 4]
    return (255.0 - ink[..., :3]) * (255.0 - ink[..., 3:]) / 255.0


def _png16(path: Path, samples: np.ndarray, colour_type: int, trns: bytes | None = None) -> Path:
    """A 16-bit PNG of `samples` ([H, W] or [H, W, C] uint16) written by hand (Pillow writes none),
    with a tRNS chunk of `trns` when given."""
    h, w = samples.shape[:2]
    raw = b"".join(b"\0" + samples[r].astype(">u2").tobytes() for r in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, colour_type, 0, 0, 0)
    key = chunk(b"tRNS", trns) if trns is not None else b""
    body = chunk(b"IHDR", ihdr) + key + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)
    return path


def _decoded(path: Path) -> np.ndarray:
    probe_image(path, 64_000_000, full=True)  # what a scan checks first
    return np.asarray(load_rgb(path)).astype(np.float64)  # [H, W, 3]


def _max_error(got: np.ndarray, reference: np.ndarray) -> float:
    assert got.shape == reference.shape
    return float(np.abs(got - reference).max())


def test_cmyk_and_ycck_jpegs_render_as_viewers_show_them(tmp_path: Path) -> None:
    ink = np.stack([XS * 5, YS * 9, 255 - XS * 6, (XS + YS) * 2], -1).clip(0, 255).astype(np.uint8)
    cmyk = tmp_path / "cmyk.jpg"
    Image.fromarray(ink, mode="CMYK").save(cmyk, quality=100)  # Adobe CMYK, black ink too
    # YCCK: the same inks with C, M, Y stored as one Y/Cb/Cr triple (libjpeg turns it back into
    # 255 - those inks, and an Adobe file's samples are inverted), flagged by the Adobe marker's
    # transform byte (2); Pillow writes CMYK only, so the samples and that byte are set by hand
    ycc = np.asarray(Image.fromarray(ink[..., :3]).convert("YCbCr")).astype(np.int16)
    stored = np.concatenate([255 - ycc, ink[..., 3:].astype(np.int16)], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(stored, mode="CMYK").save(buf, "JPEG", quality=100)
    data = bytearray(buf.getvalue())
    marker = data.find(b"Adobe")
    data[marker + 11] = 2
    ycck = tmp_path / "ycck.jpg"
    ycck.write_bytes(bytes(data))
    with Image.open(ycck) as img:
        assert img.info.get("adobe_transform") == 2 and img.mode == "CMYK"
    for path in (cmyk, ycck):
        assert _max_error(_decoded(path), _cmyk_reference(path)) <= 1.0, path.name
    # and both are the inks given, up to the JPEG codec
    assert _max_error(_decoded(cmyk), (255.0 - ink[..., :3]) * (255.0 - ink[..., 3:]) / 255.0) <= 6.0
    assert _max_error(_decoded(ycck), _decoded(cmyk)) <= 6.0


def test_sixteen_bit_pngs_are_their_samples_scaled_to_eight_bits(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rgb16 = GRADIENT.astype(np.uint16) * 257 + rng.integers(0, 257, GRADIENT.shape).astype(np.uint16)
    alpha16 = np.full((24, 40), 30000, dtype=np.uint16)
    cases = {
        "rgb": (rgb16, 2, rgb16 / 257.0),
        "grey": (rgb16[..., 0], 0, np.repeat(rgb16[..., :1] / 257.0, 3, -1)),
        "grey_alpha": (
            np.stack([rgb16[..., 0], alpha16], -1),
            4,
            _on_white(np.repeat(rgb16[..., :1] / 257.0, 3, -1), alpha16 / 257.0),
        ),
        "rgba": (
            np.concatenate([rgb16, alpha16[..., None]], -1),
            6,
            _on_white(rgb16 / 257.0, alpha16 / 257.0),
        ),
    }
    for name, (samples, colour_type, reference) in cases.items():
        path = _png16(tmp_path / f"{name}.png", samples, colour_type)
        # within one level: 16-bit RGB keeps each sample's high byte (Pillow), grey is rounded
        assert _max_error(_decoded(path), reference) <= 1.0, name


def test_transparency_is_composited_onto_white(tmp_path: Path) -> None:
    rgba = np.concatenate([GRADIENT, ALPHA[..., None]], -1)  # [24, 40, 4]
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "rgba.png")
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "rgba.webp", lossless=True)
    Image.fromarray(np.stack([GRADIENT[..., 0], ALPHA], -1), mode="LA").save(tmp_path / "la.png")
    palette = Image.fromarray(GRADIENT).quantize(16)
    palette.save(tmp_path / "palette.png", transparency=3)  # index 3 transparent (tRNS)
    grey = np.repeat(GRADIENT[..., :1], 3, -1)
    for name, reference in {
        "rgba.png": _on_white(GRADIENT, ALPHA),
        "rgba.webp": _on_white(GRADIENT, ALPHA),
        "la.png": _on_white(grey, ALPHA),
    }.items():
        assert _max_error(_decoded(tmp_path / name), reference) <= 1.0, name
    indices = np.asarray(palette)  # [24, 40] palette indices
    colours = np.asarray(palette.getpalette()[: 3 * 256], dtype=np.float64).reshape(-1, 3)
    reference = np.where((indices == 3)[..., None], 255.0, colours[indices])
    assert (indices == 3).any() and _max_error(_decoded(tmp_path / "palette.png"), reference) == 0.0


def test_a_png_colour_key_is_transparency_composited_onto_white(tmp_path: Path) -> None:
    """RELIABILITY 553: a grey or RGB PNG whose tRNS chunk names one transparent value (a colour
    key, what PNG optimisers make of an RGBA image whose transparent pixels share one colour)
    trained with those pixels in their stored colour (black here), where viewers show them
    transparent and the same picture as RGBA trained them white; its thumbnail showed them black,
    alpha_mask did not see them and a mask's key was not transparent. They are transparency now."""
    from lorastudio.data.masks import image_has_alpha, load_mask
    from lorastudio.data.thumbnails import render_thumbnail

    picture = GRADIENT.copy()
    picture[:, :10] = 0  # the key colour, left quarter
    transparent = np.zeros((24, 40), dtype=bool)
    transparent[:, :10] = True
    grey = np.where(transparent, 0, picture[..., 1] + 5).astype(np.uint8)  # 0 only where transparent
    Image.fromarray(picture).save(tmp_path / "rgb_key.png", transparency=(0, 0, 0))
    Image.fromarray(grey, mode="L").save(tmp_path / "grey_key.png", transparency=0)
    grey16 = grey.astype(np.uint16) * 257
    _png16(tmp_path / "grey16_key.png", grey16, 0, trns=struct.pack(">H", 0))
    as_rgba = np.concatenate([picture, np.where(transparent, 0, 255).astype(np.uint8)[..., None]], -1)
    Image.fromarray(as_rgba, mode="RGBA").save(tmp_path / "rgba.png")
    white = np.where(transparent[..., None], 255.0, picture.astype(np.float64))
    grey_white = np.repeat(np.where(transparent, 255.0, grey.astype(np.float64))[..., None], 3, -1)
    for name, reference in {
        "rgb_key.png": white,
        "rgba.png": white,
        "grey_key.png": grey_white,
        "grey16_key.png": grey_white,
    }.items():
        assert _max_error(_decoded(tmp_path / name), reference) == 0.0, name
        with Image.open(tmp_path / name) as img:
            assert image_has_alpha(img), name  # alpha_mask reads it
        shown = render_thumbnail(tmp_path / name, 40, max_pixels=10**6, decode_pixels=10**6)
        thumb = np.asarray(Image.open(io.BytesIO(shown)).convert("RGB"), dtype=np.float64)  # [24, 40, 3]
        assert thumb[:, :8].min() > 235, name  # the preview shows white there too
    (tmp_path / "data" / "masks").mkdir(parents=True)
    Image.fromarray(picture).save(tmp_path / "data" / "a.png")
    (tmp_path / "data" / "a.txt").write_text("a")
    Image.new("L", (40, 24), 255).save(tmp_path / "data" / "masks" / "a.png", transparency=255)
    from lorastudio.data.masks import attach_masks

    item = attach_masks(scan_dataset(tmp_path / "data", resolution=32, multiple=16), alpha_mask=False).items[
        0
    ]
    assert np.asarray(load_mask(item)).max() == 0  # a mask all of its transparent value: black


# EXIF orientation -> the upright picture from the stored pixels [H, W, C] (EXIF 2.3, 4.6.4 A)
UPRIGHT = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],  # mirrored horizontally
    3: lambda a: a[::-1, ::-1],  # rotated 180
    4: lambda a: a[::-1],  # mirrored vertically
    5: lambda a: a.transpose(1, 0, 2),  # mirrored along the main diagonal
    6: lambda a: np.rot90(a, -1),  # rotated 90 clockwise to view
    7: lambda a: np.rot90(a, 2).transpose(1, 0, 2),  # mirrored along the other diagonal
    8: lambda a: np.rot90(a, 1),  # rotated 90 counter-clockwise to view
}


@pytest.mark.parametrize("suffix", [".jpg", ".png", ".webp"])
def test_every_exif_orientation_is_shown_upright(tmp_path: Path, suffix: str) -> None:
    for orientation, upright in UPRIGHT.items():
        path = tmp_path / f"o{orientation}{suffix}"
        exif = Image.Exif()
        exif[0x0112] = orientation
        options = {"quality": 100} if suffix == ".jpg" else {"lossless": True} if suffix == ".webp" else {}
        Image.fromarray(GRADIENT).save(path, exif=exif.tobytes(), **options)
        info = probe_image(path, 64_000_000, full=True)
        reference = upright(GRADIENT.astype(np.float64))
        assert (info.height, info.width) == reference.shape[:2], orientation
        tolerance = 8.0 if suffix == ".jpg" else 0.0  # the JPEG codec's own loss
        assert _max_error(_decoded(path), reference) <= tolerance, (suffix, orientation)


def test_progressive_jpeg_decodes_and_truncated_ones_are_refused(tmp_path: Path) -> None:
    Image.fromarray(GRADIENT).save(tmp_path / "progressive.jpg", progressive=True, quality=100)
    assert _max_error(_decoded(tmp_path / "progressive.jpg"), GRADIENT.astype(np.float64)) <= 8.0
    noise = np.random.default_rng(1).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    for name, options in {"baseline": {}, "prog": {"progressive": True}}.items():
        whole = io.BytesIO()
        Image.fromarray(noise).save(whole, "JPEG", quality=95, **options)
        cut = tmp_path / f"cut_{name}.jpg"
        cut.write_bytes(whole.getvalue()[: len(whole.getvalue()) * 2 // 3])
        with pytest.raises(DatasetError, match="truncated"):
            probe_image(cut, 64_000_000, full=True)  # never trained half grey
        with pytest.raises(DatasetError, match="truncated"):
            load_rgb(cut)


def test_animated_gif_and_bomb_files_are_refused_naming_why(tmp_path: Path) -> None:
    frames = [Image.fromarray(GRADIENT), Image.fromarray(255 - GRADIENT)]
    frames[0].save(tmp_path / "anim.webp", save_all=True, append_images=frames[1:], lossless=True)
    frames[0].save(tmp_path / "anim.png", save_all=True, append_images=frames[1:])
    frames[0].save(tmp_path / "gif.png", format="GIF", save_all=True, append_images=frames[1:])
    png_header_only(tmp_path / "bomb.png", 60_000, 60_000)
    expected = {
        "anim.webp": "animated WebP of 2 frames",
        "anim.png": "animated PNG (APNG) of 2 frames",
        "gif.png": "not a PNG/JPEG/WebP image",
        "bomb.png": "oversized",
    }
    for name, why in expected.items():
        with pytest.raises(DatasetError) as err:
            probe_image(tmp_path / name, 64_000_000, full=True)
        assert why in err.value.problems[0], name


def test_tiny_and_very_wide_images_fill_their_bucket(tmp_path: Path) -> None:
    """A 1x1 image trains as its colour over the whole bucket; a 20:1 one at the widest bucket
    (4:1), its centre cut (the preflight names the cut: crop.cut_warning)."""
    Image.new("RGB", (1, 1), (200, 10, 30)).save(tmp_path / "dot.png")
    wide = np.tile(GRADIENT[:1], (8, 4, 1))[:, :160]  # [8, 160, 3]: columns vary
    Image.fromarray(np.ascontiguousarray(wide)).save(tmp_path / "wide.png")
    for name in ("dot", "wide"):
        (tmp_path / f"{name}.txt").write_text(name)
    items = {it.path.name: it for it in scan_dataset(tmp_path, resolution=32, multiple=16).items}
    dot = load_crop(items["dot.png"], random_crop=False, flip=False, rng=np.random.default_rng(0))
    expected = np.array([200, 10, 30], dtype=np.float32)[:, None, None] / 127.5 - 1.0  # [3, 1, 1]
    np.testing.assert_allclose(dot.pixels, np.broadcast_to(expected, dot.pixels.shape), atol=1e-6)
    assert items["wide.png"].bucket == (64, 16)  # 4:1, the widest
    crop = load_crop(items["wide.png"], random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert crop.pixels.shape == (3, 16, 64) and crop.original_size == (8, 160)
    # the centre of the picture scaled by 2 (to cover 16 px high): columns 128..191 of 320
    scaled = np.asarray(
        Image.fromarray(np.ascontiguousarray(wide)).resize((320, 16), Image.Resampling.LANCZOS)
    )
    reference = scaled[:, 128:192].astype(np.float32).transpose(2, 0, 1) / 127.5 - 1.0  # [3, 16, 64]
    np.testing.assert_allclose(crop.pixels, reference, atol=1e-6)
