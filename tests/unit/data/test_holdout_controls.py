"""A validation folder of an edit run (data/holdout.split_validation): images without controls
beside a training set whose every image edits its controls are refused by name; with controls
(or on a text-to-image run) they are held out."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.data.conftest import write_image

from lorastudio.data import scan_dataset
from lorastudio.data.holdout import split_validation
from lorastudio.errors import ConfigError


def _folder(root: Path, stems: list[str], controls: bool) -> Path:
    root.mkdir(parents=True)
    for stem in stems:
        write_image(root / f"{stem}.png", seed=ord(stem[0]))
        (root / f"{stem}.txt").write_text(f"edit {stem}")
        if controls:
            (root / "control").mkdir(exist_ok=True)
            write_image(root / "control" / f"{stem}.png", seed=200 + ord(stem[0]))
    return root


def _scan(root: Path):
    return scan_dataset(root, resolution=64, multiple=16, control_images=(0, 1), family="edit-fam")


def test_a_validation_folder_without_controls_of_an_edit_run_is_refused(tmp_path):
    """Its loss measured text-to-image generation while the run learnt an edit, unsaid."""
    train = _scan(_folder(tmp_path / "train", ["a", "b"], controls=True))
    bare = _folder(tmp_path / "val", ["v"], controls=False)
    with pytest.raises(ConfigError) as err:
        split_validation(train, "val", 0, resolve_folder=lambda _: bare, scan_folder=_scan)
    [problem] = err.value.problems
    assert problem.field == "validation_split"
    assert "1 image(s) without a control image (v.png)" in problem.message
    paired = _folder(tmp_path / "val2", ["w"], controls=True)
    held = split_validation(train, "val2", 0, resolve_folder=lambda _: paired, scan_folder=_scan)
    assert [it.path.name for it in held.validation] == ["w.png"]
    plain = _scan(_folder(tmp_path / "plain", ["p"], controls=False))  # a text-to-image run: as before
    assert (
        len(split_validation(plain, "val", 0, resolve_folder=lambda _: bare, scan_folder=_scan).validation)
        == 1
    )
