"""load_crop: shape, range, resize-to-cover, centre/random crop, flip, EXIF, colour modes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data import ImageItem, load_crop, resized_size, scan_dataset
from lorastudio.errors import DatasetError


def _item(path: Path, bucket: tuple[int, int]) -> ImageItem:
    with Image.open(path) as img:
        w, h = img.size
    return ImageItem(path=path, caption="c", caption_source="default", width=w, height=h, bucket=bucket)


def _to_uint8(pixels: np.ndarray) -> np.ndarray:
    return np.rint((pixels + 1.0) * 127.5).astype(np.int64).transpose(1, 2, 0)  # [H, W, 3]


def test_output_shape_dtype_range_and_sizes(tmp_path, make_image):
    path = make_image(tmp_path / "a.png", (90, 50))
    crop = load_crop(_item(path, (48, 32)), random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert crop.pixels.shape == (3, 32, 48)
    assert crop.pixels.dtype == np.float32
    assert crop.pixels.min() >= -1.0 and crop.pixels.max() <= 1.0
    assert crop.pixels.min() < -0.9 and crop.pixels.max() > 0.9  # noise uses the full range
    assert crop.original_size == (50, 90)
    rw, rh = resized_size(90, 50, (48, 32))
    assert (rw, rh) == (58, 32)  # covers the bucket: scale = max(48/90, 32/50) = 0.64
    assert crop.crop_top_left == (0, (58 - 48) // 2)


def test_exact_size_centre_crop_is_the_image(tmp_path, make_image):
    path = make_image(tmp_path / "a.png", (48, 32), seed=4)
    crop = load_crop(_item(path, (48, 32)), random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert crop.crop_top_left == (0, 0)
    assert np.array_equal(_to_uint8(crop.pixels), np.asarray(Image.open(path), dtype=np.int64))


def test_centre_crop_takes_the_middle(tmp_path, make_image):
    pixels = np.zeros((32, 96, 3), dtype=np.uint8)  # [H, W, 3]
    pixels[:, 32:64] = 255  # white middle third
    path = make_image(tmp_path / "a.png", pixels=pixels)
    crop = load_crop(_item(path, (32, 32)), random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert crop.crop_top_left == (0, 32)
    assert np.allclose(crop.pixels, 1.0)


def test_flip_mirrors_pixels_and_offset(tmp_path, make_image):
    path = make_image(tmp_path / "a.png", (100, 40), seed=2)
    item = _item(path, (48, 32))
    plain = load_crop(item, random_crop=True, flip=False, rng=np.random.default_rng(5))
    flipped = load_crop(item, random_crop=True, flip=True, rng=np.random.default_rng(5))
    rw, _ = resized_size(100, 40, (48, 32))
    assert np.array_equal(flipped.pixels, plain.pixels[:, :, ::-1])
    assert flipped.crop_top_left[0] == plain.crop_top_left[0]
    assert flipped.crop_top_left[1] == rw - plain.crop_top_left[1] - 48


def test_random_crop_is_deterministic_per_rng_and_in_bounds(tmp_path, make_image):
    path = make_image(tmp_path / "a.png", (160, 40), seed=3)
    item = _item(path, (32, 32))
    rw, rh = resized_size(160, 40, (32, 32))
    offsets = set()
    for seed in range(12):
        a = load_crop(item, random_crop=True, flip=False, rng=np.random.default_rng(seed))
        b = load_crop(item, random_crop=True, flip=False, rng=np.random.default_rng(seed))
        assert a.crop_top_left == b.crop_top_left and np.array_equal(a.pixels, b.pixels)
        top, left = a.crop_top_left
        assert 0 <= top <= rh - 32 and 0 <= left <= rw - 32
        offsets.add(a.crop_top_left)
    assert len(offsets) > 1


def test_exif_orientation_is_applied(tmp_path, make_image):
    stored = np.zeros((40, 80, 3), dtype=np.uint8)  # [H, W, 3] stored landscape
    stored[:, :40] = (255, 0, 0)  # left half red, right half blue
    stored[:, 40:] = (0, 0, 255)
    make_image(tmp_path / "rot.jpg", pixels=stored, orientation=6)  # display = rotate 90 deg clockwise
    scan = scan_dataset(tmp_path, resolution=64, multiple=16, default_caption="x", aspect_buckets=False)
    crop = load_crop(scan.items[0], random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert crop.original_size == (80, 40)
    rgb = _to_uint8(crop.pixels)  # [64, 64, 3]; the left side of the stored image is now on top
    assert rgb[2, 32, 0] > 200 and rgb[2, 32, 2] < 60
    assert rgb[61, 32, 2] > 200 and rgb[61, 32, 0] < 60


def test_transparent_png_is_composited_on_white(tmp_path, make_image):
    pixels = np.zeros((32, 32, 4), dtype=np.uint8)  # fully transparent black
    path = make_image(tmp_path / "a.png", pixels=pixels)
    crop = load_crop(_item(path, (32, 32)), random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert np.allclose(crop.pixels, 1.0)


def test_16_bit_grayscale_keeps_its_brightness(tmp_path):
    path = tmp_path / "deep.png"
    Image.fromarray(np.full((32, 32), 32896, dtype=np.uint16)).save(path)  # 32896 / 257 = 128
    crop = load_crop(_item(path, (32, 32)), random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert np.allclose(_to_uint8(crop.pixels), 128)


def test_file_gone_bad_after_scan_raises_dataset_error(tmp_path, make_image):
    path = make_image(tmp_path / "a.png", (32, 32))
    item = _item(path, (32, 32))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(DatasetError) as info:
        load_crop(item, random_crop=False, flip=False, rng=np.random.default_rng(0))
    assert info.value.problems[0].startswith("a.png:")


def test_the_preflight_names_the_images_random_crop_cannot_move(tmp_path, make_image):
    """An image that fills its bucket exactly has one crop whatever the rng draws (the setting
    changes nothing for it): the warning names it and counts the ones it moves; an image with
    room at any of its resolutions is movable; no warning without random_crop or without one."""
    from lorastudio.data.crop import crop_warning

    fits = _item(make_image(tmp_path / "fits.png", (64, 64)), (64, 64))
    wide = _item(make_image(tmp_path / "wide.png", (90, 50)), (48, 32))
    rng = np.random.default_rng(0)
    crops = {load_crop(fits, random_crop=True, flip=False, rng=rng).crop_top_left for _ in range(8)}
    assert crops == {(0, 0)}  # the premise: the same crop every time
    assert len({load_crop(wide, random_crop=True, flip=False, rng=rng).crop_top_left for _ in range(8)}) > 1
    warning = crop_warning([fits, wide], random_crop=True)
    assert warning is not None and warning.startswith("random_crop moves 1 of 2 image(s): 1 fill")
    assert warning.endswith(": fits.png") and "wide.png" not in warning
    assert crop_warning([fits, wide], random_crop=False) is None
    assert crop_warning([wide], random_crop=True) is None
    at_two = [fits, _item(fits.path, (48, 80))]  # the same image at a second resolution: room there
    assert crop_warning(at_two, random_crop=True) is None


def test_the_preflight_names_the_images_the_crop_cuts_a_lot_of(tmp_path, make_image):
    """An image beyond the buckets' aspect ratios (1:4 to 4:1), or any non-square image without
    aspect_buckets, loses what its bucket does not hold: the images losing more than a quarter are
    named with the share cut, measured on the real crops."""
    from lorastudio.data.crop import CUT_WARN_SHARE, cut_warning

    for name, size in {"tall.png": (100, 1000), "wide.png": (3000, 500), "photo.png": (1600, 900)}.items():
        make_image(tmp_path / name, size)
    scan = scan_dataset(tmp_path, resolution=64, multiple=16, default_caption="x")
    for item in scan.items:  # the premise, from the pixels load_crop returns
        kept = item.bucket[0] * item.bucket[1] / np.prod(resized_size(item.width, item.height, item.bucket))
        assert (1 - kept > CUT_WARN_SHARE) == (item.path.name != "photo.png")
    warning = cut_warning(scan.items, aspect_buckets=True)
    assert warning == (
        "2 image(s) lose more than 25% to the crop of their bucket (no bucket has their shape: buckets "
        "span 1:4 to 4:1 in steps of the side multiple): tall.png (60% cut), wide.png (33% cut); crop them "
        "to what matters"
    )
    square = scan_dataset(tmp_path, resolution=64, multiple=16, default_caption="x", aspect_buckets=False)
    warning = cut_warning(square.items, aspect_buckets=False)
    assert warning is not None and warning.startswith("3 image(s) lose more than 25% to the crop")
    assert "photo.png (44% cut)" in warning  # 16:9 in a square
    assert warning.endswith("set aspect_buckets = true to train them in their own shape")
