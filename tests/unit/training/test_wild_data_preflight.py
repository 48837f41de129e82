"""Datasets as users bring them from the web and the peer trainers, through the real preflight on
the tiny FLUX.1 (session 31 wild-data audit)."""

from __future__ import annotations

import shutil
from pathlib import Path

from lorastudio.settings import get_settings
from lorastudio.training.preflight import preflight


def test_the_same_image_under_two_names_is_named_by_the_preflight(
    make_config, sample_dataset: Path, tmp_path: Path
) -> None:
    """A web-gathered folder holding `photo.png` and `photo (1).png` trained that picture twice as
    often as the others, said nowhere (RELIABILITY 1000); a copy in a second entry (a kohya
    regularisation folder sharing a training image) is named with its entry."""
    data = tmp_path / "data"
    shutil.copytree(sample_dataset, data)
    shutil.copy(data / "shape_01.png", data / "shape_01 (1).png")  # no caption of its own: the trigger
    cfg = make_config(data_dir=str(data), resolution=32, trigger_word="sks")
    prepared = preflight(cfg, get_settings(), "cpu")
    (said,) = [w for w in prepared.dataset_warnings if "copies of another" in w]
    assert "shape_01 (1).png = shape_01.png;" in said and said.startswith("2 image(s)"), said

    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(data / "shape_03.png", other / "again.png")
    shutil.copy(data / "shape_04.png", other / "new.png")
    (data / "shape_01 (1).png").unlink()
    entries = [{"path": str(data)}, {"path": str(other), "trigger_word": "sks"}]
    cfg = make_config(data_dir=None, datasets=entries, resolution=32)
    prepared = preflight(cfg, get_settings(), "cpu")
    (said,) = [w for w in prepared.dataset_warnings if "copies of another" in w]
    pairs = f"{data}/shape_03.png = {other}/again.png; {data}/shape_04.png = {other}/new.png;"
    assert pairs in said and said.startswith("4 image(s)"), said
