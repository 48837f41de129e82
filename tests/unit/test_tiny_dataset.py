"""The sample dataset: 8 captioned PNGs, some non-square, deterministic, idempotent, atomic."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from lorastudio.errors import DatasetError
from lorastudio.tiny import make_sample_dataset
from lorastudio.tiny.dataset import RGB, SHAPE_NAMES

CAPTION = re.compile(
    rf"^an? ({'|'.join(RGB)}) ({'|'.join(SHAPE_NAMES)}) on an? ({'|'.join(RGB)}) background$"
)


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_eight_captioned_pngs_some_not_square(sample_dataset):
    pngs = sorted(sample_dataset.glob("*.png"))
    assert len(pngs) == 8
    assert sorted(p.name for p in sample_dataset.iterdir()) == sorted(
        [p.name for p in pngs] + [p.with_suffix(".txt").name for p in pngs]
    )
    sizes = []
    for png in pngs:
        with Image.open(png) as image:
            assert image.format == "PNG" and image.mode == "RGB"
            sizes.append(image.size)
    assert sizes.count((64, 64)) == 6
    assert {(96, 64), (64, 96)} <= set(sizes)


def test_each_caption_names_the_colours_in_its_image(sample_dataset):
    shapes = set()
    for png in sorted(sample_dataset.glob("*.png")):
        caption = png.with_suffix(".txt").read_text(encoding="utf-8").strip()
        match = CAPTION.match(caption)
        assert match, caption
        fg, shape, bg = match.groups()
        assert fg != bg
        shapes.add(shape)
        pixels = np.asarray(Image.open(png)).reshape(-1, 3)
        colours = {tuple(int(v) for v in row) for row in np.unique(pixels, axis=0)}
        assert colours == {RGB[fg], RGB[bg]}, caption
        assert (pixels == RGB[bg]).all(axis=1).mean() > 0.2  # the background shows
    assert len(shapes) >= 6  # varied shapes


def test_same_seed_same_bytes_other_seed_other_images(tmp_path, sample_dataset):
    again = make_sample_dataset(tmp_path / "again")
    assert _snapshot(again) == _snapshot(sample_dataset)
    other = make_sample_dataset(tmp_path / "other", seed=7)
    assert _snapshot(other) != _snapshot(sample_dataset)


def test_idempotent(tmp_path):
    folder = make_sample_dataset(tmp_path / "data")
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert make_sample_dataset(folder) == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # no staging left over


def test_refuses_a_folder_holding_something_else(tmp_path):
    folder = make_sample_dataset(tmp_path / "data")
    (folder / "shape_00.txt").write_text("my own caption\n")
    before = _snapshot(folder)
    with pytest.raises(DatasetError, match="already exists"):
        make_sample_dataset(folder)
    assert _snapshot(folder) == before
    with pytest.raises(DatasetError, match="seed 3"):
        make_sample_dataset(tmp_path / "data", seed=3)


def test_fills_an_empty_folder(tmp_path):
    (tmp_path / "data").mkdir()
    folder = make_sample_dataset(tmp_path / "data")
    assert len(list(folder.glob("*.png"))) == 8
