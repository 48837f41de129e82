"""Folders as the peer trainers and the web leave them (session 31 wild-data audit): their files
named for what they are, a caption held in a form not read never trained as the trigger word
instead, and a folder whose images sit in sub-folders answered with those folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorastudio.data import scan_dataset
from lorastudio.errors import DatasetError


def _scan(root: Path, **kwargs):
    kwargs.setdefault("trigger_word", "sks")
    return scan_dataset(root, resolution=64, multiple=16, **kwargs)


def test_other_tools_files_are_named_for_what_they_are(tmp_path: Path, make_image) -> None:
    """Each was "not an image (supported: .png, ...)" (RELIABILITY 1001)."""
    for stem in ("a", "b"):
        make_image(tmp_path / f"{stem}.png")
        (tmp_path / f"{stem}.txt").write_text(f"{stem} caption")
    (tmp_path / "a.json").write_text(json.dumps({"caption": "a scraped caption"}))  # a has its .txt
    for name in ("multidatabackend.json", "concepts.json", "dataset_config.toml", "b_1024x1024_flux.npz",
                 "c.heic", "d.avif", "e.gif", "f.tiff", "notes.md"):  # fmt: skip
        (tmp_path / name).write_bytes(b"x")
    dropped = dict(_scan(tmp_path).dropped)
    assert dropped["multidatabackend.json"].startswith("SimpleTuner's dataset config: not read; each of its")
    assert dropped["concepts.json"].startswith("OneTrainer's concepts file: not read")
    assert (
        "image_dir -> path, num_repeats -> repeats, is_reg -> regularisation"
        in dropped["dataset_config.toml"]
    )
    assert dropped["b_1024x1024_flux.npz"].startswith("another trainer's cached latents")
    assert (
        dropped["a.json"]
        == "a JSON caption sidecar: not read (save its caption as a.txt or a metadata.jsonl row)"
    )
    assert dropped["c.heic"] == "a HEIC image: not read; convert it to PNG, JPEG or WebP"
    assert dropped["d.avif"].startswith("an AVIF image") and dropped["e.gif"].startswith("a GIF image")
    assert dropped["f.tiff"].startswith("a TIFF image")
    assert dropped["notes.md"].startswith("not an image")


@pytest.mark.parametrize("where", ["caption", "json", "csv", "link", "meta_cap"])
def test_a_caption_held_in_a_form_not_read_is_refused_not_trained_as_the_trigger(
    tmp_path: Path, make_image, where: str
) -> None:
    """kohya's `.caption` in a plain folder, a scraper's `<stem>.json`, HF imagefolder's
    metadata.csv, a `.txt` linked in from elsewhere: the image trained on the trigger word alone,
    its caption named only among the files not used (RELIABILITY 1002). Now refused naming the file and the fix; an image with a
    caption of its own keeps the file a warning."""
    make_image(tmp_path / "a.png")
    make_image(tmp_path / "b.png", seed=1)
    (tmp_path / "b.txt").write_text("b's own caption")
    if where == "caption":
        (tmp_path / "a.caption").write_text("a kohya caption")
        (tmp_path / "b.caption").write_text("b kohya caption")
    elif where == "json":
        (tmp_path / "a.json").write_text(json.dumps({"caption": "a scraped caption"}))
    elif where == "meta_cap":  # kohya's fine-tuning metadata
        (tmp_path / "meta_cap.json").write_text(json.dumps({"a": {"caption": "a kohya caption"}}))
    elif where == "csv":
        (tmp_path / "metadata.csv").write_text("file_name,text\na.png,a hub caption\n")
    else:  # a caption kept elsewhere, linked in: links are never followed
        (tmp_path.parent / "a-caption.txt").write_text("a caption elsewhere")
        (tmp_path / "a.txt").symlink_to(tmp_path.parent / "a-caption.txt")
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    (problem,) = err.value.problems
    name = {"caption": "a.caption", "json": "a.json", "csv": "metadata.csv", "link": "a.txt"}.get(
        where, "meta_cap.json"
    )
    assert problem.startswith(f"{name}: "), problem
    table = "1 image(s) have no caption of their own"
    tail = {"csv": table, "meta_cap": table, "link": "a.png has no caption of its own (copy"}
    assert tail.get(where, "a.png has no caption of its own") in problem, problem
    fix = {
        "caption": "rename it a.txt",
        "json": "save its caption as a.txt",
        "csv": "lorastudio datasets import",
        "link": "copy the caption file itself into the folder",
        "meta_cap": 'save its captions as metadata.jsonl, one {"file_name", "text"} object per line',
    }
    assert fix[where] in problem and problem.endswith("to train without it)"), problem
    if where == "link":  # a second caption file beside the image's own: named, not refused
        (tmp_path / "a.txt").unlink()
        (tmp_path / "a.TXT").symlink_to(tmp_path.parent / "a-caption.txt")
    (tmp_path / "a.txt").write_text("a's own caption")  # every image captioned: named, not refused
    scan = _scan(tmp_path)
    assert ("a.TXT" if where == "link" else name) in dict(scan.dropped)
    assert {it.caption for it in scan.items} == {"sks, a's own caption", "sks, b's own caption"}


def test_a_folder_whose_images_are_in_sub_folders_names_them(tmp_path: Path, make_image) -> None:
    """A HF `train/` split, OneTrainer's concept folders and kohya's `img/` parent were answered
    "no png/jpg/jpeg/webp files (sub-folders are not scanned)", naming no folder (RELIABILITY 1003)."""
    for folder in ("train", "5_sks dog", "empty"):
        (tmp_path / folder).mkdir()
    make_image(tmp_path / "train" / "a.png")
    make_image(tmp_path / "train" / "b.png")
    make_image(tmp_path / "5_sks dog" / "c.png")
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    problems = err.value.problems
    assert problems[1:] == [
        f"{tmp_path / '5_sks dog'}: 1 image(s) in a sub-folder; a kohya N_words folder: set kohya_folders = "
        "true to train these folders as entries",
        f"{tmp_path / 'train'}: 2 image(s) in a sub-folder; give this folder as data_dir, or each such folder "
        "as a [[datasets]] entry",
    ], problems
    (tmp_path / "metadata.jsonl").write_text('{"file_name": "train/a.png", "text": "a"}\n')  # HF's rows
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    assert err.value.problems[2].endswith(
        f"(metadata.jsonl here is read from the images' own folder only: `lorastudio datasets import {tmp_path}` "
        "stores the images its rows name with their captions)"
    )


def test_a_metadata_row_naming_the_image_otherwise_is_refused_not_trained_as_the_trigger(
    tmp_path: Path, make_image
) -> None:
    """HF's `images/a.png` rows beside a flattened folder, or `B.PNG` for b.png: the rows were
    "listed in metadata.jsonl but not found" among the files not used, the images trained on the
    trigger word (RELIABILITY 1002)."""
    for stem in ("a", "b", "c"):
        make_image(tmp_path / f"{stem}.png")
    rows = [("images/a.png", "an a"), ("B.PNG", "a b"), ("c.png", "a c"), ("gone.png", "none")]
    (tmp_path / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": f, "text": t}) + "\n" for f, t in rows)
    )
    with pytest.raises(DatasetError) as err:
        _scan(tmp_path)
    assert err.value.problems == [
        "metadata.jsonl row 'images/a.png': no such file here; a.png has no caption of its own (a row's file_name "
        "is the image's own name in this folder: a.png; or delete the row to train without it)",
        "metadata.jsonl row 'B.PNG': no such file here; b.png has no caption of its own (a row's file_name is the "
        "image's own name in this folder: b.png; or delete the row to train without it)",
    ]


def test_a_kohya_caption_of_another_extension_is_never_replaced_by_the_folders_words(
    tmp_path: Path, make_image
) -> None:
    """kohya's --caption_extension takes any extension: a folder captioned in `.tags` files was
    imported "2 captioned" with every caption the folder's words, and trained so in place
    (kohya_folders), the files named "not an image" (RELIABILITY 1005). Now the import skips each
    such image naming its file and the fix, and a run refuses it; kohya's `.npz` latent cache
    beside an image is no caption."""
    from lorastudio.data.kohya import plan_kohya_import

    folder = tmp_path / "img" / "3_ohwx cat"
    folder.mkdir(parents=True)
    for stem in ("a", "b", "c"):
        make_image(folder / f"{stem}.png", seed=ord(stem))
        (folder / f"{stem}.npz").write_bytes(b"kohya latents")
    (folder / "a.tags").write_text("a tag, cat")
    (folder / "b.tags").write_text("b tag, cat")
    (folder / "b.txt").write_text("b's caption")  # its own caption: the .tags only named
    plan = plan_kohya_import(tmp_path / "img")
    assert [(r["file_name"], r["text"]) for r in plan.rows] == [
        ("b.png", "b's caption"),
        ("c.png", "ohwx cat"),
    ]
    skipped = dict(plan.skipped)
    rename = "if it holds a's caption (kohya's caption_extension .tags), rename it a.txt"
    assert rename in skipped["3_ohwx cat/a.png"] and skipped["3_ohwx cat/a.png"].endswith(
        "a.png has no caption of its own"
    )
    assert skipped["3_ohwx cat/b.tags"].startswith("a file of an image's name, not read")
    assert skipped["3_ohwx cat/a.npz"] == "not an image or a caption (.txt, .caption)"

    with pytest.raises(DatasetError) as err:
        scan_dataset(folder, resolution=64, multiple=16, default_caption="ohwx cat", kohya=True)
    (problem,) = err.value.problems
    assert problem.startswith("a.tags: a file of an image's name") and rename in problem, problem
