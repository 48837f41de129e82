"""Real-world image files in every path that reads them (session 32 image files audit): the
training crop (data.crop.load_crop: the latent cache's input), the bucket, a pair's control, the
loss mask, the thumbnail, the captioner's input and generation's reference image all see one
picture, the reference decode computed here with Pillow (ImageOps.exif_transpose, transparency
composited onto white, README's dataset section); files that cannot be shown so are refused
naming the file and why. The decode itself per format: test_data_decode_reference.py; ICC
profiles: test_data_colour.py."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from lorastudio.captioning.run import fit_pixels
from lorastudio.data import load_crop, scan_dataset
from lorastudio.data.crop import WINDOW_AREA, resized_size
from lorastudio.data.dataset_detail import dataset_detail
from lorastudio.data.images import load_rgb, probe_image
from lorastudio.data.masks import attach_masks, load_mask, mask_crop
from lorastudio.data.pairs import load_control_crop
from lorastudio.data.thumbnails import render_thumbnail
from lorastudio.errors import DatasetError
from lorastudio.generate.references import fit_reference

LANCZOS = Image.Resampling.LANCZOS
YS, XS = np.mgrid[0:60, 0:80]
STORED = np.stack([XS * 3, YS * 4, (XS + YS) * 2], -1).clip(0, 255).astype(np.uint8)  # [60, 80, 3] landscape


def _reference(path: Path) -> np.ndarray:
    """The picture a viewer shows: [H, W, 3] uint8, upright, transparency onto white."""
    with Image.open(path) as img:
        shown = ImageOps.exif_transpose(img)
        rgba = shown.convert("RGBA")
    return np.asarray(Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB"))


def _cover(picture: np.ndarray, bucket: tuple[int, int], top_left: tuple[int, int]) -> np.ndarray:
    """[bh, bw, C] float: `picture` resized whole to cover `bucket`, cut at `top_left`."""
    img = Image.fromarray(picture)
    rw, rh = resized_size(img.width, img.height, bucket)
    whole = np.asarray(img.resize((rw, rh), LANCZOS, reducing_gap=3.0) if (rw, rh) != img.size else img)
    top, left = top_left
    return whole[top : top + bucket[1], left : left + bucket[0]].astype(np.float64)


def _pixels(crop: np.ndarray) -> np.ndarray:
    """A [3, H, W] crop in [-1, 1] as [H, W, 3] levels."""
    return (crop.transpose(1, 2, 0).astype(np.float64) + 1.0) * 127.5


def test_a_phone_portrait_is_upright_in_every_path(tmp_path: Path) -> None:
    """EXIF orientations 2-8 on a target, its control and its mask (each stored landscape, as a
    phone stores a portrait photo): a portrait bucket, and the same upright picture in the
    training crop, the control's crop, the mask's crop, the thumbnail, the captioner's input, a
    generation reference and the dataset page's size (RELIABILITY 1037: it said the stored
    80x60)."""
    root = tmp_path / "ds"
    (root / "control").mkdir(parents=True)
    (root / "masks").mkdir()
    mask = np.zeros((60, 80), np.uint8)
    mask[:20, :30] = 255  # top-left corner as stored
    for o in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        Image.fromarray(STORED).save(root / f"o{o}.png", exif=exif.tobytes())
        Image.fromarray(255 - STORED).save(root / "control" / f"o{o}.png", exif=exif.tobytes())
        Image.fromarray(mask).save(root / "masks" / f"o{o}.png", exif=exif.tobytes())
        (root / f"o{o}.txt").write_text("x")
    scan = attach_masks(
        scan_dataset(root, resolution=64, multiple=16, control_images=(0, 1)), alpha_mask=False
    )
    listed = {f["file"]: (f["width"], f["height"]) for f in dataset_detail(root)["files"]}
    for item in scan.items:
        name = item.path.name
        picture = _reference(item.path)  # [H, W, 3] upright
        height, width = picture.shape[:2]
        assert (item.width, item.height) == (width, height) == listed[name], name
        assert (item.bucket[1] > item.bucket[0]) == (height > width), name  # portrait bucket
        crop = load_crop(item, random_crop=False, flip=False, rng=np.random.default_rng(0))
        reference = _cover(picture, item.bucket, crop.crop_top_left)
        assert np.abs(_pixels(crop.pixels) - reference).max() <= 0.51, name
        resized = resized_size(width, height, item.bucket)
        control = load_control_crop(item.controls[0], item.bucket, crop.crop_top_left, resized, False)
        control_reference = _cover(_reference(item.controls[0]), item.bucket, crop.crop_top_left)
        assert np.abs(_pixels(control) - control_reference).max() <= 0.51, name
        upright_mask = np.asarray(ImageOps.exif_transpose(Image.open(item.mask.path)))  # [H, W]
        cut = mask_crop(item, crop.crop_top_left, False, 1)
        assert np.abs(cut * 255.0 - _cover(upright_mask, item.bucket, crop.crop_top_left)).max() <= 0.51
        thumb = Image.open(io.BytesIO(render_thumbnail(item.path, 40, max_pixels=10**6, decode_pixels=10**6)))
        small = Image.fromarray(picture)
        small.thumbnail((40, 40), LANCZOS)
        assert thumb.size == small.size, name
        assert np.abs(np.asarray(thumb, np.float64) - np.asarray(small)).mean() < 3.0, name  # JPEG's loss
        assert np.array_equal(np.asarray(fit_pixels(load_rgb(item.path))), picture), name  # the captioner's
        fitted = np.asarray(fit_reference(load_rgb(item.path), 48, 64), np.float64)  # generation's
        cover_w, cover_h = resized_size(width, height, (48, 64))
        centre = ((cover_h - 64) // 2, (cover_w - 48) // 2)
        assert np.abs(fitted - _cover(picture, (48, 64), centre)).max() <= 0.51, name


def test_the_dataset_page_lists_each_format_upright(tmp_path: Path) -> None:
    """RELIABILITY 1037: a JPEG, WebP and PNG portrait stored landscape with orientation 6."""
    exif = Image.Exif()
    exif[0x0112] = 6
    for suffix in (".jpg", ".webp", ".png"):
        Image.fromarray(STORED).save(tmp_path / f"p{suffix}", exif=exif.tobytes())
    Image.fromarray(STORED).save(tmp_path / "plain.jpg")
    sizes = {f["file"]: (f["width"], f["height"]) for f in dataset_detail(tmp_path)["files"]}
    assert sizes == {"p.jpg": (60, 80), "p.webp": (60, 80), "p.png": (60, 80), "plain.jpg": (80, 60)}


def test_an_image_far_beyond_its_bucket_is_cut_from_a_window(tmp_path: Path, monkeypatch) -> None:
    """RELIABILITY 1036: a 1x2000 strip (and its control and mask) covering a 16x64 bucket was
    enlarged whole to 16x32000 before its crop was cut (at resolution 1024, a 1x4000 strip: 512 x
    2,048,000 pixels, ~3 GB and a minute per crop; generation's 1x4000 reference at 1024x1024: 12
    GB). Now no resize makes more than WINDOW_AREA times the bucket, and the crop is the whole
    resize's within 2 levels."""
    rows = 128 + 100 * np.sin(np.arange(2000) / 7.0)  # [2000]
    strip = np.repeat(rows.astype(np.uint8)[:, None, None], 3, -1)  # [2000, 1, 3]
    root = tmp_path / "ds"
    (root / "control").mkdir(parents=True)
    (root / "masks").mkdir()
    Image.fromarray(strip).save(root / "tall.png")
    Image.fromarray(255 - strip).save(root / "control" / "tall.png")
    Image.fromarray(strip[..., 0]).save(root / "masks" / "tall.png")
    (root / "tall.txt").write_text("x")
    item = attach_masks(
        scan_dataset(root, resolution=32, multiple=16, control_images=(0, 1)), alpha_mask=False
    ).items[0]
    assert item.bucket == (16, 64)
    made: list[tuple[int, int]] = []
    resize = Image.Image.resize

    def recording(self: Image.Image, size: tuple[int, int], *args: object, **kwargs: object) -> Image.Image:
        made.append(tuple(size))
        return resize(self, size, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "resize", recording)
    crop = load_crop(item, random_crop=True, flip=False, rng=np.random.default_rng(3))
    control = load_control_crop(item.controls[0], item.bucket, crop.crop_top_left, (16, 32000), False)
    cut = mask_crop(item, crop.crop_top_left, False, 1)
    fitted = fit_reference(Image.fromarray(strip), 64, 64)
    assert made and max(w * h for w, h in made) <= WINDOW_AREA * 64 * 64
    monkeypatch.setattr(Image.Image, "resize", resize)
    assert crop.crop_top_left[0] > 0  # a window inside the strip, not its edge
    assert np.abs(_pixels(crop.pixels) - _cover(strip, item.bucket, crop.crop_top_left)).max() <= 2.0
    assert np.abs(_pixels(control) - _cover(255 - strip, item.bucket, crop.crop_top_left)).max() <= 2.0
    assert np.abs(cut * 255.0 - _cover(strip[..., 0], item.bucket, crop.crop_top_left)).max() <= 2.0
    centre = ((64 * 2000 - 64) // 2, 0)
    assert np.abs(np.asarray(fitted, np.float64) - _cover(strip, (64, 64), centre)).max() <= 2.0


def _grey_png(path: Path, samples: np.ndarray, bits: int, key: int) -> Path:
    """A grey PNG of `bits` per sample ([H, W] values < 2**bits) with the colour key `key`, by hand."""
    per = 8 // bits
    rows = []
    for row in samples:
        padded = np.concatenate([row, np.zeros(-len(row) % per, row.dtype)]).reshape(-1, per)
        packed = sum(padded[:, j].astype(np.uint16) << (8 - bits * (j + 1)) for j in range(per))
        rows.append(b"\0" + packed.astype(np.uint8).tobytes())

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", samples.shape[1], samples.shape[0], bits, 0, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + chunk(b"tRNS", struct.pack(">H", key))
    body += chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)
    return path


@pytest.mark.parametrize("bits", [2, 4])
def test_a_low_bit_grey_png_colour_key_is_transparent(tmp_path: Path, bits: int) -> None:
    """RELIABILITY 1038: a 2- or 4-bit grey PNG (what PNG optimisers make of a few-grey image)
    whose tRNS names one grey transparent trained those pixels in their grey: Pillow scales the
    pixels to 8 bits but not the key. They are white now in training and the thumbnail, and
    transparent for alpha_mask."""
    top = (1 << bits) - 1
    samples = np.tile(np.array([top, 0, 1, 1], np.uint8), (8, 4))  # [8, 16]; key 1 in columns 2, 3, 6, ...
    path = _grey_png(tmp_path / "key.png", samples, bits, 1)
    keyed = samples == 1
    expected = np.where(keyed, 255.0, samples * (255.0 / top))
    assert np.array_equal(np.asarray(load_rgb(path))[..., 0], expected)
    thumb = np.asarray(
        Image.open(io.BytesIO(render_thumbnail(path, 16, max_pixels=10**6, decode_pixels=10**6)))
    )
    assert thumb[:, 2:4].min() > 200  # shown white, not the key's dark grey
    (tmp_path / "key.txt").write_text("x")
    item = attach_masks(scan_dataset(tmp_path, resolution=32, multiple=16), alpha_mask=True).items[0]
    alpha = np.asarray(load_mask(item))  # [8, 16]: what alpha_mask trains with
    assert np.array_equal(alpha == 0, keyed)


def test_unusable_files_are_refused_naming_the_file_and_why(tmp_path: Path) -> None:
    """RELIABILITY 1039: a 16-bit RGB PNG with a colour key cannot be shown at 8 bits (Pillow keeps
    each sample's high byte: the key's pixels trained opaque, others sharing its high bytes
    transparent); it is refused. So are the formats no path reads, whatever their name."""
    samples = np.full((4, 6, 3), 30000, np.uint16)
    samples[:, :2] = (0x1234, 0x5678, 0x9ABC)
    raw = b"".join(b"\0" + row.astype(">u2").tobytes() for row in samples)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    body = chunk(b"IHDR", struct.pack(">IIBBBBB", 6, 4, 16, 2, 0, 0, 0))
    body += chunk(b"tRNS", struct.pack(">HHH", 0x1234, 0x5678, 0x9ABC)) + chunk(b"IDAT", zlib.compress(raw))
    (tmp_path / "key48.png").write_bytes(b"\x89PNG\r\n\x1a\n" + body + chunk(b"IEND", b""))
    Image.fromarray(np.zeros((4, 6), np.float32), mode="F").save(tmp_path / "float.png", format="TIFF")
    frames = [Image.new("RGB", (6, 4), c) for c in ("red", "blue")]
    frames[0].save(tmp_path / "pages.png", format="TIFF", save_all=True, append_images=frames[1:])
    frames[0].save(tmp_path / "anim.webp", save_all=True, append_images=frames[1:], lossless=True)
    expected = {
        "key48.png": "16-bit RGB PNG with a colour key",
        "float.png": "not a PNG/JPEG/WebP image",
        "pages.png": "not a PNG/JPEG/WebP image",
        "anim.webp": "animated WebP of 2 frames",
    }
    for name, why in expected.items():
        with pytest.raises(DatasetError) as err:
            probe_image(tmp_path / name, 10**6, full=True)
        assert err.value.problems[0].startswith(f"{name}: ") and why in err.value.problems[0], name
    with pytest.raises(DatasetError, match="16-bit RGB PNG with a colour key"):
        load_rgb(tmp_path / "key48.png")


def test_a_control_its_pipeline_cannot_size_is_refused_naming_it(tmp_path: Path) -> None:
    """RELIABILITY 1040: a control under 16 px a side (or far from square) crashed FLUX.1
    Kontext's sizing (ZeroDivisionError in the scan) and gave FLUX.2 a 0-px control (8000x8 ->
    8000x0) to crop and encode, Qwen-Image-Edit's a 0-px side (1x40000): each is refused now,
    naming the control, in the scan and a sample prompt's references alike."""
    from lorastudio import families
    from lorastudio.config_samples import SamplePrompt
    from lorastudio.data.control_sizing import ControlTooSmall, control_size
    from lorastudio.data.run_scan import with_control_sizes
    from lorastudio.data.sample_refs import sample_references

    for family, size in (("flux-kontext", (8000, 8)), ("flux2", (8000, 8)), ("qwen-image-edit", (1, 40000))):
        with pytest.raises(ControlTooSmall, match=f"{size[0]}x{size[1]} is sized to"):
            control_size(families.get(family).spec.control_sizing, "pipeline", *size)
    root = tmp_path / "ds"
    (root / "control").mkdir(parents=True)
    Image.fromarray(STORED).save(root / "a.png")
    Image.new("RGB", (400, 8)).save(root / "control" / "a.png")
    (root / "a.txt").write_text("x")
    Image.new("RGB", (10, 10)).save(root / "tiny.png")
    (root / "tiny.txt").write_text("y")
    scan = scan_dataset(root, resolution=64, multiple=16, control_images=(0, 1))
    spec = families.get("flux2").spec
    with pytest.raises(DatasetError) as err:
        with_control_sizes(scan, spec, "pipeline")
    assert err.value.problems[0].startswith("control image control/a.png: 400x8 is sized to 400x0")
    assert with_control_sizes(scan, spec, "target") is scan  # controls cut with their target: any size
    _, problems = sample_references(
        [SamplePrompt(prompt="p", controls=["tiny.png"])],
        scan,
        (0, 4),
        family="flux2",
        max_pixels=10**6,
        sizing=spec.control_sizing,
        rule="pipeline",
    )
    assert problems == [f"sample prompt 0: control tiny.png: {problems[0].split(': ', 2)[2]}"]
    assert "10x10 is sized to 0x0" in problems[0]


def test_transparency_is_white_in_every_path(tmp_path: Path) -> None:
    """README's rule, held (session 32 audit): an RGBA target and control whose transparent
    pixels store magenta, an LA one and a palette one with tRNS train, preview, caption and
    generate with those pixels white, and alpha_mask reads them as unmasked."""
    root = tmp_path / "ds"
    (root / "control").mkdir(parents=True)
    opaque = XS >= 40  # [60, 80]: the right half opaque
    rgba = np.dstack([STORED, np.where(opaque, 255, 0).astype(np.uint8)])
    rgba[~opaque, :3] = (255, 0, 255)  # garbage under alpha 0
    Image.fromarray(rgba, "RGBA").save(root / "rgba.png")
    Image.fromarray(rgba, "RGBA").save(root / "control" / "rgba.png")
    Image.fromarray(np.dstack([STORED[..., 1], rgba[..., 3]]), "LA").save(root / "la.png")
    palette = Image.fromarray(np.where(opaque[..., None], STORED, 0).astype(np.uint8)).quantize(32)
    palette.save(root / "p.png", transparency=int(np.asarray(palette)[0, 0]))
    for name in ("rgba", "la", "p"):
        (root / f"{name}.txt").write_text(name)
    items = attach_masks(
        scan_dataset(root, resolution=64, multiple=16, control_images=(0, 1)), alpha_mask=True
    )
    for item in items.items:
        crop = load_crop(item, random_crop=False, flip=False, rng=np.random.default_rng(0))
        left = _pixels(crop.pixels)[:, :4]  # [bh, 4, 3]: from the transparent half
        assert left.min() >= 254.0, item.path.name
        assert np.asarray(fit_pixels(load_rgb(item.path)))[:, :38].min() == 255, item.path.name  # captioner
        assert np.asarray(fit_reference(load_rgb(item.path), 64, 48))[:, :4].min() >= 254, item.path.name
        thumb = Image.open(io.BytesIO(render_thumbnail(item.path, 40, max_pixels=10**6, decode_pixels=10**6)))
        assert np.asarray(thumb)[:, :16].min() > 235, item.path.name  # JPEG's loss
        assert mask_crop(item, crop.crop_top_left, False, 1)[:, :4].max() == 0.0, item.path.name
        if item.controls:
            resized = resized_size(item.width, item.height, item.bucket)
            control = load_control_crop(item.controls[0], item.bucket, crop.crop_top_left, resized, False)
            assert _pixels(control)[:, :4].min() >= 254.0


def test_a_headers_exif_is_found_by_seeking(tmp_path: Path) -> None:
    """orientation.header_has_exif (the dataset listing's cue to read an orientation, fix 1037)
    agrees with Pillow: a JPEG's EXIF behind a 60 KB segment, a PNG's eXIf, a WebP's VP8X
    flag; a file without EXIF (or with a PNG eXIf after its image data, which Pillow's header-only
    open does not read) is not opened."""
    from lorastudio.data.orientation import header_has_exif

    exif = Image.Exif()
    exif[0x0112] = 6
    picture = Image.fromarray(STORED)
    picture.save(tmp_path / "icc.jpg", exif=exif.tobytes())
    jpeg = (tmp_path / "icc.jpg").read_bytes()
    app2 = b"\xff\xe2" + struct.pack(">H", 2 + 60_000) + b"\0" * 60_000  # a 60 KB segment before the EXIF
    (tmp_path / "icc.jpg").write_bytes(jpeg[:2] + app2 + jpeg[2:])
    picture.save(tmp_path / "e.png", exif=exif.tobytes())
    picture.save(tmp_path / "e.webp", exif=exif.tobytes())
    for suffix in (".jpg", ".png", ".webp"):
        picture.save(tmp_path / f"plain{suffix}")
    late = (tmp_path / "plain.png").read_bytes()
    body = exif.tobytes()
    chunk = struct.pack(">I", len(body)) + b"eXIf" + body + struct.pack(">I", zlib.crc32(b"eXIf" + body))
    (tmp_path / "late.png").write_bytes(late[:-12] + chunk + late[-12:])  # before IEND, after IDAT
    found = {}
    for path in sorted(tmp_path.iterdir()):
        with open(path, "rb") as fh:
            found[path.name] = header_has_exif(fh)
    assert found == {
        "icc.jpg": True,
        "e.png": True,
        "e.webp": True,
        "plain.jpg": False,
        "plain.png": False,
        "plain.webp": False,
        "late.png": False,
    }
    with Image.open(tmp_path / "icc.jpg") as img:
        assert img.getexif()[0x0112] == 6  # Pillow reads it there too
