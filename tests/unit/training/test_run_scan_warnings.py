"""A run states in its log every warning the preflight gives about its dataset (session 29
observability audit). The run logged four of the preflight's seven (data/scan_warnings.py): the
sample dataset's two images cut by a third to fit their bucket, a validation image that is a
training image too and images left undecoded were said by the preflight only, so a run started
without one (`lorastudio train`, a script's POST /api/train/start) never said them."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.preflight import preflight


def test_a_run_logs_the_preflights_cut_and_overlap_warnings(
    make_config, sample_dataset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    held = tmp_path / "held"
    held.mkdir()
    for suffix in (".png", ".txt"):  # a validation image that is a training image too, one not
        shutil.copy(sample_dataset / f"shape_00{suffix}", held / f"again{suffix}")
    Image.new("RGB", (32, 32), (10, 200, 30)).save(held / "other.png")
    (held / "other.txt").write_text("a different caption of another image")
    cfg = make_config(data_dir=str(sample_dataset), resolution=32, validation_split=str(held))
    caplog.set_level(logging.WARNING, logger="lorastudio")
    prepared = preflight(cfg, get_settings(), "cpu")
    said = [r.getMessage() for r in caplog.records if r.name == "lorastudio.training.preflight"]
    cut = [m for m in said if "to the crop of their bucket" in m]
    assert len(cut) == 1 and "shape_06.png (33% cut), shape_07.png (33% cut)" in cut[0], said
    overlap = [m for m in said if "are also training images" in m]
    assert len(overlap) == 1 and "again.png (= shape_00.png)" in overlap[0], said
    assert list(prepared.dataset_warnings) == [*cut, *overlap]  # what the run's record keeps (fix 847)


def test_a_run_reports_its_dataset_warnings_once_before_its_first_step(
    make_config, sample_dataset: Path
) -> None:
    """The run's DatasetWarnings event (the record's `dataset_warnings`, the Live and run pages):
    the preflight's words, once, before the first step."""
    cfg = make_config(data_dir=str(sample_dataset), resolution=32, steps=1, output_name="warned")
    events: list = []
    train(cfg, events.append, device="cpu")
    said = [e for e in events if e.type == "dataset_warnings"]
    assert len(said) == 1, [e.type for e in events]
    (cut,) = [w for w in said[0].warnings if "to the crop of their bucket" in w]
    assert "shape_06.png (33% cut), shape_07.png (33% cut)" in cut
    types = [e.type for e in events]
    assert types.index("dataset_warnings") < types.index("progress")
