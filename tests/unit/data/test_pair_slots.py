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


def test_a_control_dir_that_is_the_dataset_or_a_control_folder_read_already_is_refused(tmp_path):
    """control_dirs naming the dataset folder made every target its own control (a copy learnt),
    and naming its control/ folder gave each target the same control twice: both were trained."""
    root = tmp_path / "data"
    _targets(root, ["a"])
    (root / "control").mkdir()
    write_image(root / "control" / "a.png")
    with pytest.raises(DatasetError) as err:
        _scan(root, control_dirs=[root])
    assert err.value.problems == [
        f"control_dirs: {root} is the dataset folder itself: each image would be its own control; "
        "give the folder of the control images"
    ]
    (tmp_path / "link").symlink_to(root / "control")
    with pytest.raises(DatasetError) as err:
        _scan(root, control_dirs=[tmp_path / "link"])
    assert err.value.problems == [
        f"control_dirs: {tmp_path / 'link'} is the control folder control/ read already (an earlier slot): "
        "each image would take the same control twice; remove it"
    ]


def test_a_control_of_a_format_not_read_is_named_not_skipped(tmp_path):
    """control/a.bmp was skipped unsaid: on a family that trains mixed datasets a.png trained
    text-to-image without the control it was given. Now refused naming it; other entries of a
    control folder not read are listed with the dataset's files not used."""
    root = tmp_path / "data"
    _targets(root, ["a", "b"])
    (root / "control" / "nested").mkdir(parents=True)
    write_image(root / "control" / "a.bmp")
    write_image(root / "control" / "b.png")
    (root / "control" / "notes.txt").write_text("x")
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert err.value.problems == [
        "control/a.bmp: a BMP image: not read; convert it to PNG, JPEG or WebP; a.png would train without a "
        "control from control/"
    ]
    (root / "control" / "a.bmp").unlink()
    scan = _scan(root)
    assert [len(it.controls) for it in scan.items] == [0, 1]
    assert scan.dropped == [
        ("control/nested", "sub-folder (control folders are not scanned recursively)"),
        ("control/notes.txt", "not an image (supported: .png, .jpg, .jpeg, .webp)"),
    ]


def test_a_control_whose_name_differs_in_case_is_named_with_its_target(tmp_path):
    root = tmp_path / "data"
    _targets(root, ["a"])
    (root / "control").mkdir()
    write_image(root / "control" / "A.png")
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert err.value.problems == [
        "control/A.png: control image with no target of the same name (rename or remove it; a.png differs "
        "only in case: names are matched exactly)"
    ]


def test_a_folder_control_of_a_target_whose_metadata_row_names_its_controls_is_listed_as_not_used(tmp_path):
    """A metadata.jsonl row's control_files win over control/<stem>: the folder's image was
    skipped with no word (neither an orphan nor a file not used)."""
    root = tmp_path / "data"
    _targets(root, ["a"])
    (root / "control").mkdir()
    write_image(root / "control" / "a.png")
    (root / "refs").mkdir()
    write_image(root / "refs" / "ref.png")
    (root / "metadata.jsonl").write_text('{"file_name": "a.png", "control_files": ["refs/ref.png"]}\n')
    scan = _scan(root)
    assert scan.items[0].controls == (root / "refs" / "ref.png",)
    assert ("control/a.png", "a.png's controls are the ones its metadata.jsonl row names") in scan.dropped


def test_a_metadata_row_naming_the_image_itself_as_its_control_is_refused(tmp_path):
    """`{"file_name": "a.png", "control_file_name": "a.png"}` trained a.png as its own edit."""
    root = tmp_path / "data"
    _targets(root, ["a"])
    (root / "metadata.jsonl").write_text('{"file_name": "a.png", "control_file_name": "./a.png"}\n')
    with pytest.raises(DatasetError) as err:
        _scan(root)
    assert err.value.problems == [
        "a.png: control a.png is the image itself (the edit learnt would be a copy); name its reference image"
    ]
