"""kohya `N_words` folders (data/kohya.py): the name gives repeats and words; a DIR of such
folders flattens to images plus metadata.jsonl rows with caption, repeats and folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.data.kohya import KohyaFolder, parse_kohya_folder, plan_kohya_import
from lorastudio.errors import DatasetError


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("10_sks ball", KohyaFolder(10, "sks ball")),
        ("1_style", KohyaFolder(1, "style")),
        ("3_sks_dog  toy", KohyaFolder(3, "sks dog toy")),
        ("040_a", KohyaFolder(40, "a")),
    ],
)
def test_folder_names_give_repeats_and_words(name: str, expected: KohyaFolder) -> None:
    assert parse_kohya_folder(name) == expected


@pytest.mark.parametrize(
    ("name", "why"),
    [("img", "expected <repeats>_<words>"), ("0_x", "at least 1"), ("5__", "no words"), ("x_10", "expected")],
)
def test_other_names_are_refused_with_the_reason(name: str, why: str) -> None:
    with pytest.raises(DatasetError) as err:
        parse_kohya_folder(name)
    assert any(p.startswith(f"{name}: ") and why in p for p in err.value.problems), err.value.problems


def _img(path: Path) -> None:
    Image.new("RGB", (16, 16), "red").save(path)


def test_a_kohya_dir_flattens_to_rows_with_captions_and_repeats(tmp_path: Path) -> None:
    src = tmp_path / "img"
    (src / "10_sks ball").mkdir(parents=True)
    (src / "2_ball").mkdir()
    (src / "notes").mkdir()
    _img(src / "10_sks ball" / "a.png")
    (src / "10_sks ball" / "a.txt").write_text("a red sks ball\n")
    _img(src / "10_sks ball" / "b.png")  # no caption: the folder's words
    (src / "10_sks ball" / "readme.md").write_text("x")
    _img(src / "2_ball" / "c.png")
    _img(src / "2_ball" / "a.png")  # the name is taken by 10_sks ball
    plan = plan_kohya_import(src)
    assert [name for _, name in plan.images] == ["a.png", "b.png", "c.png"]
    assert plan.rows == [
        {"file_name": "a.png", "text": "a red sks ball", "repeats": 10, "kohya_folder": "10_sks ball"},
        {"file_name": "b.png", "text": "sks ball", "repeats": 10, "kohya_folder": "10_sks ball"},
        {"file_name": "c.png", "text": "ball", "repeats": 2, "kohya_folder": "2_ball"},
    ]
    skipped = dict(plan.skipped)
    assert skipped["2_ball/a.png"] == "a.png is already taken by 10_sks ball"
    assert skipped["10_sks ball/readme.md"] == "not an image or a caption (.txt, .caption)"
    assert "expected <repeats>_<words>" in skipped["notes"]
    assert [json.loads(line) for line in plan.metadata_jsonl().decode().splitlines()] == plan.rows


def test_a_dir_without_kohya_folders_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    _img(tmp_path / "plain" / "a.png")
    with pytest.raises(DatasetError) as err:
        plan_kohya_import(tmp_path)
    assert "no <repeats>_<words> sub-folders" in err.value.problems[0]


def test_a_regularisation_parent_gives_its_kohya_folders_no_trigger_word(tmp_path: Path) -> None:
    """kohya_folders with a regularisation entry (kohya's reg/ folder): each `N_class` sub-folder
    is a regularisation entry whose words caption its images, never a trigger word."""
    from lorastudio.data.kohya import kohya_entries
    from lorastudio.data.mix import MixEntry

    (tmp_path / "1_person").mkdir()
    (tmp_path / "1_person" / "a.png").write_bytes(b"")
    [reg] = kohya_entries(MixEntry(label="reg", root=tmp_path, regularisation=True))
    assert (reg.trigger_word, reg.default_caption, reg.regularisation, reg.repeats) == (
        None,
        "person",
        True,
        1,
    )
    [plain] = kohya_entries(MixEntry(label="img", root=tmp_path))
    assert (plain.trigger_word, plain.regularisation) == ("person", False)
