"""Issue 29 part 4, data side: loss masks from a masks/ folder or the alpha channel, checked and
named at scan time, covered by the fingerprint, and cut exactly like the image's crop (resize,
random crop, flip) down to the latent grid."""

from __future__ import annotations

import unicodedata
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data import load_crop, scan_dataset
from lorastudio.data.mask_import import plan_masks
from lorastudio.data.masks import (
    attach_masks,
    mask_clashes,
    mask_crop,
    mask_section,
    mask_warning,
    masked_setting_problems,
    masks_of,
)
from lorastudio.errors import ConfigError, DatasetError


def _noise_image(size: tuple[int, int], seed: int, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = len(mode)
    arr = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(arr, mode=mode) if channels > 1 else Image.fromarray(arr[..., 0], mode="L")


def _dataset(tmp_path: Path, sizes: dict[str, tuple[int, int]]) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    for i, (name, size) in enumerate(sizes.items()):
        _noise_image(size, i).save(root / f"{name}.png")
        (root / f"{name}.txt").write_text(f"image {name}")
    return root


def _scan(root: Path, **kwargs):
    scan = scan_dataset(root, resolution=64, multiple=16, aspect_buckets=kwargs.pop("aspect_buckets", True))
    alpha = kwargs.pop("alpha_mask", False)
    scan = attach_masks(scan, alpha_mask=alpha)
    problems = masked_setting_problems(scan, alpha, kwargs.pop("uw", 0.0))
    if problems:
        raise ConfigError(problems)
    return scan


def test_masks_folder_attached_counted_fingerprinted_and_missing_ones_named(tmp_path: Path) -> None:
    root = _dataset(tmp_path, {"a": (80, 64), "b": (64, 64), "c": (64, 96)})
    plain = scan_dataset(root, resolution=64, multiple=16)
    assert attach_masks(plain, alpha_mask=False) is plain  # no masks/: unchanged
    (root / "masks").mkdir()
    _noise_image((80, 64), 10, "L").save(root / "masks" / "a.png")
    _noise_image((64, 64), 11, "L").save(root / "masks" / "b.jpg")
    scan = _scan(root)
    assert [it.mask is not None for it in scan.items] == [True, True, False]
    assert scan.fingerprint != plain.fingerprint and "masks" not in dict(scan.dropped)
    assert mask_section(scan.items, False) == {
        "source": "masks/ folder",
        "images_with_mask": 2,
        "without_mask": ["c.png"],
    }
    assert mask_warning(scan.items) == "1 image(s) have no mask and train unmasked: c.png"
    _noise_image((80, 64), 12, "L").save(root / "masks" / "a.png")  # another mask: another fingerprint
    assert _scan(root).fingerprint != scan.fingerprint


def test_a_wrong_size_or_orphan_mask_is_named_and_settings_that_mean_nothing_are_refused(
    tmp_path: Path,
) -> None:
    root = _dataset(tmp_path, {"a": (80, 64), "b": (64, 64)})
    with pytest.raises(ConfigError) as nothing:
        _scan(root, uw=0.5)
    assert nothing.value.problems[0].field == "unmasked_weight"
    (root / "masks").mkdir()
    _noise_image((64, 80), 1, "L").save(root / "masks" / "a.png")  # rotated: wrong size
    _noise_image((64, 64), 2, "L").save(root / "masks" / "zz.png")  # no image zz
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert err.value.problems == [
        "masks/zz.png: no image named zz.* in the dataset",
        "masks/a.png: 64x80, but a.png is 80x64 (a mask must have its image's size)",
    ]
    with pytest.raises(ConfigError) as both:
        _scan(root, alpha_mask=True)
    assert both.value.problems[0].field == "alpha_mask"


def test_a_mask_pairs_with_its_image_in_another_unicode_normalisation(tmp_path: Path) -> None:
    """A mask copied from macOS (NFD name) pairs with its image stored in NFC and the other way
    round, as control images do (data.paths.stem_key): the scan, the preflight and the listing
    read the same pairing; an NFC and an NFD mask of one image are a clash, not two masks."""
    nfc, nfd = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
    other_nfd = unicodedata.normalize("NFD", "señor")
    root = _dataset(tmp_path, {nfc: (64, 64), other_nfd: (80, 64)})
    (root / "masks").mkdir()
    _noise_image((64, 64), 1, "L").save(root / "masks" / f"{nfd}.png")
    _noise_image((80, 64), 2, "L").save(root / "masks" / f"{unicodedata.normalize('NFC', other_nfd)}.png")
    scan = _scan(root)
    assert all(it.mask is not None for it in scan.items), [it.path.name for it in scan.items]
    assert mask_warning(scan.items) is None
    assert masks_of(root, nfc) == [root / "masks" / f"{nfd}.png"]  # deleted with its image
    assert mask_clashes(root) == {}
    _noise_image((64, 64), 3, "L").save(root / "masks" / f"{nfc}.jpg")  # a second mask of café
    both = sorted([f"{nfd}.png", f"{nfc}.jpg"])
    assert mask_clashes(root) == {nfc: both}
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert err.value.problems == [
        f"masks/{both[0]}, masks/{both[1]}: 2 masks for the image {nfc}.* (which one?): keep one"
    ]


def test_deleting_an_image_takes_its_nfd_mask_and_the_control_of_a_dotted_stem(tmp_path: Path) -> None:
    """The delete finds what goes with an image by the same key as the run: an NFD mask of an NFC
    image, and the control of "v1.2.png" (its stem "v1.2" was keyed as "v1": the control stayed,
    an orphan every run refuses)."""
    from lorastudio.data.image_edits import delete_image

    nfc, nfd = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
    root = _dataset(tmp_path, {nfc: (64, 64), "v1.2": (64, 64), "keep": (64, 64)})
    (root / "masks").mkdir()
    (root / "control").mkdir()
    _noise_image((64, 64), 1, "L").save(root / "masks" / f"{nfd}.png")
    _noise_image((64, 64), 2, "RGB").save(root / "control" / "v1.2.png")
    _noise_image((64, 64), 3, "RGB").save(root / "control" / "keep.png")
    assert delete_image(root, f"{nfc}.png") == [f"{nfc}.png", f"{nfc}.txt", f"masks/{nfd}.png"]
    assert delete_image(root, "v1.2.png") == ["v1.2.png", "v1.2.txt", "control/v1.2.png"]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.png")) == [
        "control/keep.png",
        "keep.png",
    ]


def test_alpha_mask_reads_the_rgba_alpha_channel(tmp_path: Path) -> None:
    root = _dataset(tmp_path, {"opaque": (64, 64)})
    rgba = _noise_image((64, 64), 5, "RGBA")
    rgba.save(root / "cut.png")
    (root / "cut.txt").write_text("cut out")
    scan = _scan(root, alpha_mask=True)
    cut = next(it for it in scan.items if it.path.name == "cut.png")
    assert cut.mask is not None and cut.mask.alpha
    assert next(it for it in scan.items if it.path.name == "opaque.png").mask is None
    assert mask_warning(scan.items) == "1 image(s) have no mask and train unmasked: opaque.png"
    grid = mask_crop(cut, (0, 0), False, 1)  # the full-resolution grid: the alpha itself
    np.testing.assert_allclose(grid, np.asarray(rgba.getchannel("A"), dtype=np.float32) / 255.0, atol=1e-6)


@pytest.mark.parametrize("flip", [False, True])
def test_a_mask_is_cut_like_its_image_down_to_the_latent_grid(tmp_path: Path, flip: bool) -> None:
    root = _dataset(tmp_path, {"wide": (150, 90)})  # resized to cover the 64x64 bucket, then cropped
    image = Image.open(root / "wide.png")
    (root / "masks").mkdir()
    image.getchannel("R").save(root / "masks" / "wide.png")  # the mask is the image's red channel
    item = _scan(root, aspect_buckets=False).items[0]
    crop = load_crop(item, random_crop=True, flip=flip, rng=np.random.default_rng(3))
    assert 0 < crop.crop_top_left[1] < 107 - 64  # a real offset (resized to 107x64), so alignment is tested
    red = (crop.pixels[0] + 1.0) * 127.5 / 255.0  # [H, W] the crop's red channel in [0, 1]
    h, w = red.shape[0] // 8, red.shape[1] // 8
    expected = red.reshape(h, 8, w, 8).mean(axis=(1, 3))  # box average over 8x8 cells
    got = mask_crop(item, crop.crop_top_left, flip, 8)
    assert got.shape == (h, w)
    np.testing.assert_allclose(got, expected, atol=2e-3)
    wrong = mask_crop(replace(item), crop.crop_top_left, not flip, 8)
    assert np.abs(wrong - expected).max() > 0.05  # the other flip does not line up


@pytest.mark.parametrize("mode", ["LA", "RGBA", "P"])
def test_a_mask_painted_on_a_transparent_layer_masks_what_it_covers(tmp_path: Path, mode: str) -> None:
    """RELIABILITY 552: a masks/ file with an alpha channel was composited onto white, as an image
    is: white painted on a transparent layer (an editor's export, the transparent pixels black)
    gave a mask white everywhere, masking nothing, and its thumbnail showed the same. A mask is its
    grey times its opacity now (a transparent pixel weighs as black, as alpha_mask reads
    transparency), in training and in the dataset page's overlay; opaque masks are unchanged."""
    import io

    from lorastudio.data.masks import load_mask
    from lorastudio.data.thumbnails import render_thumbnail

    root = _dataset(tmp_path, {"a": (64, 32), "b": (64, 32)})
    (root / "masks").mkdir()
    la = np.zeros((32, 64, 2), dtype=np.uint8)  # [H, W, grey + alpha]: transparent black
    la[:, :32] = 255  # the left half painted white, opaque
    painted = Image.fromarray(la, mode="LA")
    if mode == "RGBA":
        painted = painted.convert("RGBA")
    if mode == "P":  # a palette with a transparent index
        painted = Image.fromarray(la[..., 0], mode="L").convert("P")
        painted.info["transparency"] = 0  # black is transparent
    painted.save(root / "masks" / "a.png", **({"transparency": 0} if mode == "P" else {}))
    Image.fromarray(np.full((32, 64, 4), (128, 128, 128, 255), dtype=np.uint8), mode="RGBA").save(
        root / "masks" / "b.png"
    )  # opaque grey: as before
    items = {it.path.name: it for it in _scan(root).items}
    grey = np.asarray(load_mask(items["a.png"]))  # [32, 64]
    assert grey[:, :32].min() == 255 and grey[:, 32:].max() == 0
    assert np.unique(np.asarray(load_mask(items["b.png"]))).tolist() == [128]
    shown = render_thumbnail(root / "masks" / "a.png", 64, max_pixels=10**6, decode_pixels=10**6, mask=True)

    thumb = np.asarray(Image.open(io.BytesIO(shown)).convert("L"), dtype=np.int16)  # [32, 64] JPEG
    assert thumb[:, :28].min() > 230 and thumb[:, 36:].max() < 25


def test_a_mask_made_from_an_exif_turned_images_stored_pixels_is_refused_saying_so(tmp_path: Path) -> None:
    """RELIABILITY 1734: a mask of a JPEG's stored size (24x40) beside the image turned upright
    (40x24) by EXIF orientation 6 was refused as of another size, with no word of the turn."""
    root = tmp_path / "data"
    (root / "masks").mkdir(parents=True)
    image = Image.new("RGB", (24, 40), "red")
    exif = image.getexif()
    exif[0x0112] = 6
    image.save(root / "a.jpg", exif=exif.tobytes())
    Image.new("L", (24, 40), 255).save(root / "masks" / "a.png")
    Image.new("RGB", (24, 40), "blue").save(root / "b.png")  # no turn: the plain message
    Image.new("L", (40, 24), 255).save(root / "masks" / "b.png")
    with pytest.raises(DatasetError) as caught:
        attach_masks(scan_dataset(root, resolution=32, multiple=16, trigger_word="x"), alpha_mask=False)
    first, second = caught.value.problems
    assert first.startswith(
        "masks/a.png: 24x40, but a.jpg is 40x24 (a mask must have its image's size): a.jpg is"
    )
    assert "turned upright by its EXIF orientation" in first
    assert second == "masks/b.png: 40x24, but b.png is 24x40 (a mask must have its image's size)"
    dataset = tmp_path / "imported"  # `datasets import` / an upload of that folder says the same
    dataset.mkdir()
    plan = plan_masks(root, {"a": root / "a.jpg", "b": root / "b.png"}, dataset, 64_000_000)
    assert [(name, "EXIF orientation" in why) for name, why in plan.refused] == [
        ("masks/a.png", True),
        ("masks/b.png", False),
    ]
