"""Paired datasets' slots and their problems named at once (data/pairs.py through scan_dataset):
a target's controls fill the slots from the first control folder on, and a control linking out
of the dataset does not hide the other controls' problems."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.data.conftest import write_image

from lorastudio.data import scan_dataset
from lorastudio.errors import DatasetError


def _targets(root: Path, stems: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i, stem in enumerate(stems):
        write_image(root / f"{stem}.png", seed=i)
        (root / f"{stem}.txt").write_text(f"edit {stem}")


def _scan(root: Path, **kw):
    return scan_dataset(root, resolution=64, multiple=16, control_images=(0, 3), family="edit-fam", **kw)


def test_a_control_in_a_later_folder_without_one_in_an_earlier_is_refused(tmp_path):
    """`control_2/f.png` without `control/f.*` was read as f's first control (Picture 1 of
    Qwen-Image-Edit-Plus's template), silently; a target without any control (mixed) and one
    with both stay as they were."""
    root = tmp_path / "data"
    _targets(root, ["a", "f", "g"])
    for folder, stems in (("control", ["a"]), ("control_2", ["a", "f"])):
        (root / folder).mkdir()
        for stem in stems:
            write_image(root / folder / f"{stem}.png")
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert err.value.problems == [
        "f.png: controls control_2/f.png but none in control/: its controls would shift to earlier slots "
        "(control slots follow the folders' order); add control/f.* or move its controls up a folder"
    ]
    write_image(root / "control" / "f.png")
    scan = _scan(root)
    assert [len(it.controls) for it in scan.items] == [2, 2, 0]


def test_a_control_linking_outside_does_not_hide_the_other_controls_problems(tmp_path):
    root = tmp_path / "data"
    _targets(root, ["a", "b"])
    (root / "control").mkdir()
    (root / "control" / "a.png").symlink_to(write_image(tmp_path / "secret.png"))
    (root / "control" / "b.png").write_bytes(b"not an image")
    with pytest.raises(DatasetError) as err:
        _scan(root)
    text = "\n".join(err.value.problems)
    assert "control a.png: a link to" in text and "outside the dataset folder" in text
    assert "control/b.png" in text  # checked as well: every problem at once
