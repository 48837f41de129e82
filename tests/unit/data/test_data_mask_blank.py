"""RELIABILITY 1732: a loss mask black everywhere (with unmasked_weight 0) leaves its image
nothing to teach; the preflight's warnings (data/scan_warnings.py) name it."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from lorastudio.config import TrainConfig
from lorastudio.data import scan_dataset
from lorastudio.data.masks import attach_masks
from lorastudio.data.scan_warnings import scan_warnings


def _cfg(root: Path, **kw: object) -> TrainConfig:
    raw = {"family": "flux", "base_model": "x", "resolution": 32, "data_dir": str(root), **kw}
    return TrainConfig.model_validate(raw)


def test_an_all_black_mask_is_named_by_the_preflight_warnings(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "masks").mkdir(parents=True)
    for i, (stem, grey) in enumerate({"a": 255, "b": 0, "c": 1}.items()):
        Image.new("RGB", (32, 48), (60 * i, 90, 120)).save(root / f"{stem}.png")
        Image.new("L", (32, 48), grey).save(root / "masks" / f"{stem}.png")
    scan = attach_masks(scan_dataset(root, resolution=32, multiple=16, trigger_word="sks"), alpha_mask=False)

    found = [w for w in scan_warnings(scan, _cfg(root), None) if "black" in w]

    assert len(found) == 1 and found[0].startswith("1 image(s) have a mask that is black (or transparent)")
    assert (
        "everywhere in the centred crop their bucket takes: b.png;" in found[0]
    )  # c's mask of grey 1 trains its pixels a little
    assert not [w for w in scan_warnings(scan, _cfg(root, unmasked_weight=0.1), None) if "black" in w]


def test_a_mask_white_only_where_the_bucket_cuts_it_off_is_named(tmp_path: Path) -> None:
    """RELIABILITY 1871: a 1:8 image whose mask is white only at the ends its bucket's centred
    crop cuts off trains no pixel (before: the whole mask was read, so it was not named); with
    random_crop some crops reach its ends, so it is not named; a mask white in the crop is not."""
    root = tmp_path / "data"
    (root / "masks").mkdir(parents=True)
    for stem, rows in {"ends": [(0, 48), (464, 512)], "middle": [(240, 272)]}.items():
        Image.new("RGB", (64, 512), (90, 90, 120)).save(root / f"{stem}.png")  # resized by half
        mask = Image.new("L", (64, 512), 0)
        for top, bottom in rows:
            mask.paste(255, (0, top, 64, bottom))
        mask.save(root / "masks" / f"{stem}.png")
    scan = attach_masks(scan_dataset(root, resolution=32, multiple=16, trigger_word="sks"), alpha_mask=False)
    assert all(i.bucket[1] / i.bucket[0] < 8 for i in scan.items)  # the bucket cuts the ends off

    centred = [w for w in scan_warnings(scan, _cfg(root), None) if "black" in w]
    assert len(centred) == 1, centred
    assert "everywhere in the centred crop their bucket takes: ends.png;" in centred[0]
    assert not [w for w in scan_warnings(scan, _cfg(root, random_crop=True), None) if "black" in w]
