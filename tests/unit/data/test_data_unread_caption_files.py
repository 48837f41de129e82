"""Caption files that are never opened (session 40 attack audit): a `.txt` or kohya `.caption`
that is a symbolic link, a named pipe or a device. Never followed, never read, and so never the
image's caption: the image is refused by a run (in place) and skipped by `datasets import --kohya`
naming the file, never trained or imported under the folder's words or the trigger word in
silence (RELIABILITY 2100)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lorastudio.data import scan_dataset
from lorastudio.data.kohya import plan_kohya_import
from lorastudio.errors import DatasetError


def _unread(path: Path, how: str) -> None:
    """Make `path` a caption file that is never read: a link to a real caption, or a named pipe."""
    if how == "link":
        real = path.parent.parent / f"elsewhere-{path.name}"
        real.write_text("the caption kept elsewhere")
        path.symlink_to(real)
    else:
        os.mkfifo(path)


@pytest.mark.parametrize(
    ("kohya", "suffix", "how"),
    [
        (True, ".caption", "link"),  # a .txt link was already refused (RELIABILITY 1002)
        (True, ".txt", "pipe"),
        (True, ".caption", "pipe"),
        (False, ".txt", "pipe"),
    ],
)
def test_a_caption_file_never_opened_refuses_its_image_in_place(
    tmp_path: Path, make_image, kohya: bool, suffix: str, how: str
) -> None:
    """Before: the image trained on the default caption (kohya: the folder's words) and the
    file was listed only among the files not used."""
    folder = tmp_path / "10_ohwx cat"
    folder.mkdir()
    make_image(folder / "a.png")
    make_image(folder / "b.png", seed=1)
    (folder / "b.txt").write_text("b's own caption")
    _unread(folder / f"a{suffix}", how)
    with pytest.raises(DatasetError) as err:
        scan_dataset(folder, resolution=64, multiple=16, default_caption="ohwx cat", kohya=kohya)
    (problem,) = err.value.problems
    assert problem.startswith(f"a{suffix}: ") and "a.png has no caption of its own" in problem, problem
    fix = "delete the link" if how == "link" else f"save its caption as a plain file a{suffix}, or delete it"
    assert fix in problem and problem.endswith("to train without it)"), problem
    (folder / f"a{suffix}").unlink()  # the way out the problem names: the folder's words again
    scan = scan_dataset(folder, resolution=64, multiple=16, default_caption="ohwx cat", kohya=kohya)
    assert sorted((it.path.name, it.caption) for it in scan.items) == [
        ("a.png", "ohwx cat"),
        ("b.png", "b's own caption"),
    ]


@pytest.mark.parametrize(("suffix", "how"), [(".txt", "link"), (".caption", "link"), (".txt", "pipe")])
def test_the_kohya_import_skips_an_image_whose_caption_file_is_never_opened(
    tmp_path: Path, make_image, suffix: str, how: str
) -> None:
    """Before: the caption file was skipped as "a link or a folder (not followed)" (a pipe too)
    and its image imported under the folder's words, "2 captioned"."""
    folder = tmp_path / "img" / "3_ohwx cat"
    folder.mkdir(parents=True)
    make_image(folder / "a.png")
    make_image(folder / "b.png", seed=1)
    make_image(folder / "c.png", seed=2)
    (folder / "c.txt").write_text("c's own caption")
    (folder / f"c{suffix}.bak").mkdir()  # a sub-folder: named as one, no image's caption
    _unread(folder / f"a{suffix}", how)
    plan = plan_kohya_import(tmp_path / "img")
    assert [(r["file_name"], r["text"]) for r in plan.rows] == [
        ("b.png", "ohwx cat"),
        ("c.png", "c's own caption"),
    ]
    skipped = dict(plan.skipped)
    never = "a symbolic link (not followed)" if how == "link" else "not a regular file: a named pipe"
    assert skipped[f"3_ohwx cat/a{suffix}"].startswith(never)
    assert skipped["3_ohwx cat/a.png"].startswith(f"a{suffix}: {never}")
    assert skipped["3_ohwx cat/a.png"].endswith("a.png has no caption of its own")
    assert skipped[f"3_ohwx cat/c{suffix}.bak"] == "a sub-folder (not imported)"


def test_an_import_names_a_control_that_is_a_pipe_for_what_it_is(tmp_path: Path, make_image) -> None:
    """A named pipe in control/ was skipped as "a symbolic link or a folder (not followed)"."""
    from lorastudio.data.control_import import control_files

    (tmp_path / "control").mkdir()
    make_image(tmp_path / "control" / "a.png")
    os.mkfifo(tmp_path / "control" / "b.png")
    (tmp_path / "control" / "c.png").symlink_to(tmp_path / "control" / "a.png")
    files, skipped = control_files(tmp_path)
    assert files == [("control", tmp_path / "control" / "a.png")]
    assert skipped == [
        ("control/b.png", "not a regular file: a named pipe, socket or device is never read"),
        ("control/c.png", "a symbolic link (not followed)"),
    ]


def test_an_import_names_a_mask_that_is_a_pipe_for_what_it_is(tmp_path: Path, make_image) -> None:
    """A named pipe in masks/ was skipped as "not an image file"."""
    from lorastudio.data.mask_import import plan_masks

    make_image(tmp_path / "a.png")
    (tmp_path / "masks").mkdir()
    os.mkfifo(tmp_path / "masks" / "a.png")
    plan = plan_masks(tmp_path, {"a": tmp_path / "a.png"}, tmp_path / "new", 10**6)
    assert plan.refused == [
        ("masks/a.png", "not a regular file: a named pipe, socket or device is never read")
    ]
