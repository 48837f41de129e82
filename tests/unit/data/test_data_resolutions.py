"""Several resolutions in one run (data/resolutions.py through data/entries.py): every image is
used at each resolution with that resolution's buckets, an entry may have its own, the mix
counts each (image, resolution) as an item, and the report lists buckets per resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.data.entries import entry_report, resolve_entries, scan_entries
from lorastudio.data.resolutions import buckets_by_resolution
from lorastudio.errors import ConfigError


def _folder(path: Path, sizes: list[tuple[int, int]]) -> Path:
    path.mkdir(parents=True)
    for i, size in enumerate(sizes):
        Image.new("RGB", size, (10 * i, 0, 0)).save(path / f"{i}.png")
        (path / f"{i}.txt").write_text(f"image {i}")
    return path


def _cfg(**kw: object) -> TrainConfig:
    return TrainConfig.model_validate({"family": "flux", "base_model": "x", **kw})


def test_each_image_at_each_resolution_with_its_buckets(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", [(128, 128), (256, 128)])
    b = _folder(tmp_path / "b", [(64, 64)])
    cfg = _cfg(
        resolution=[32, 64], datasets=[{"path": str(a), "repeats": 2}, {"path": str(b), "resolution": 48}]
    )
    scan = scan_entries(resolve_entries(cfg, tmp_path, allow_outside_root=True), multiple=16)
    rows = [(it.path.name, it.entry, it.resolution, it.bucket) for it in scan.items]
    assert rows == [
        ("0.png", 0, 32, (32, 32)),
        ("1.png", 0, 32, (32, 32)),  # 32's buckets: 16x64, 32x32, 64x16
        ("0.png", 0, 64, (64, 64)),
        ("1.png", 0, 64, (80, 48)),
        ("0.png", 1, 48, (48, 48)),
    ]
    assert buckets_by_resolution(scan.items) == {
        "32": {"32x32": 2},
        "48": {"48x48": 1},
        "64": {"64x64": 1, "80x48": 1},
    }
    report = entry_report(scan)
    assert [(r["images"], r["resolution"], r["samples_per_epoch"]) for r in report] == [
        (2, [32, 64], 8),
        (1, [48], 1),
    ]
    assert len({it.path.name for it in scan.items if it.entry == 0}) == 2  # checked and hashed once each


def test_resolution_lists_are_checked() -> None:
    base = {"family": "flux", "base_model": "x", "data_dir": "d"}
    for bad, why in (
        ([512, 512], "listed twice"),
        ([8], "16..4096"),
        ([], "1 to 8"),
        ([520], "multiple of 16"),
    ):
        with pytest.raises(ConfigError, match=why):
            parse_train_config({**base, "resolution": bad})
    assert parse_train_config({**base, "resolution": [512, 1024]}).resolution == [512, 1024]
