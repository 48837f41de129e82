"""`lorastudio datasets import` of a Hugging Face `imagefolder` (session 31 wild-data audit): its
metadata.csv captions reach the dataset as metadata.jsonl rows (RELIABILITY 1002)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from lorastudio.data.uploads import upload_kind
from lorastudio.errors import DatasetError
from lorastudio.settings import Settings


def _hub_folder(tmp_path: Path, csv_text: str) -> Path:
    src = tmp_path / "hub"
    src.mkdir(parents=True)
    for i, colour in enumerate(("red", "blue", "green")):
        Image.new("RGB", (32, 32), colour).save(src / f"{i}.png")
    (src / "metadata.csv").write_bytes(csv_text.encode("utf-8-sig"))  # as Excel saves "CSV UTF-8"
    return src


def test_an_imagefolder_metadata_csv_is_imported_as_its_captions(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """The CSV was skipped as "not an image, .txt caption or metadata.jsonl": the dataset trained
    on the trigger word alone. Quoted commas, a caption over two lines (CR LF), a blank caption
    (none: the image takes the next source) and a column besides are read as HF reads them."""
    src = _hub_folder(
        tmp_path,
        'file_name,text,score\r\n0.png,"a red square, flat",5\r\n1.png,"blue\r\nsquare ",4\r\n2.png,,3\r\n',
    )
    done = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "hub"])
    assert done.exit_code == 0, done.output
    assert "metadata.csv: its rows stored as metadata.jsonl" in done.output
    rows = [
        json.loads(line)
        for line in (settings.datasets_dir / "hub" / "metadata.jsonl").read_text().splitlines()
    ]
    assert rows == [
        {"file_name": "0.png", "text": "a red square, flat"},
        {"file_name": "1.png", "text": "blue\nsquare"},
    ]

    other = _hub_folder(tmp_path / "b", "image,caption\n0.png,x\n")
    refused = CliRunner().invoke(cli, ["datasets", "import", str(other), "--name", "nocol"])
    assert refused.exit_code != 0 and not (settings.datasets_dir / "nocol").exists()
    assert "no file_name column (its header: image, caption)" in str(refused.exception.problems)


def test_a_plain_import_stores_kohyas_caption_files_as_the_txt_a_dataset_reads(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A flat folder captioned in kohya's `.caption` files was imported "0 captioned", each
    skipped as "not an image, .txt caption or metadata.jsonl" (RELIABILITY 1002): now each is
    stored as the image's .txt; one beside the image's own .txt stays skipped, named."""
    src = tmp_path / "flat"
    src.mkdir()
    for stem, colour in (("a", "red"), ("b", "blue")):
        Image.new("RGB", (32, 32), colour).save(src / f"{stem}.png")
    (src / "a.caption").write_text("a from .caption")
    (src / "b.caption").write_text("b from .caption")
    (src / "b.txt").write_text("b from .txt")
    done = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "flat"])
    assert done.exit_code == 0, done.output
    assert "a.caption: stored as a.txt" in done.output
    assert "skipped b.caption (b.txt is imported instead)" in done.output
    dataset = settings.datasets_dir / "flat"
    assert sorted(p.name for p in dataset.iterdir()) == ["a.png", "a.txt", "b.png", "b.txt"]
    assert (dataset / "a.txt").read_text() == "a from .caption"


def test_an_upload_names_other_tools_files_for_what_they_are() -> None:
    """An upload (and the import's skip) said "not an image (png/jpg/jpeg/webp), a .txt caption or
    metadata.jsonl" of each (RELIABILITY 1001)."""
    said = {}
    for name in ("metadata.csv", "a.caption", "b.heic", "multidatabackend.json", "notes.pdf"):
        with pytest.raises(DatasetError) as err:
            upload_kind(name)
        said[name] = err.value.problems[0].split(": ", 1)[1]
    assert said["metadata.csv"].startswith("a Hugging Face imagefolder caption table: not read")
    assert said["a.caption"] == "a kohya .caption file: only .txt captions are read (rename it a.txt)"
    assert said["b.heic"] == "a HEIC image: not read; convert it to PNG, JPEG or WebP"
    assert said["multidatabackend.json"].startswith("SimpleTuner's dataset config")
    assert said["notes.pdf"] == "not an image (png/jpg/jpeg/webp), a .txt caption or metadata.jsonl"


def test_an_imagefolder_whose_rows_name_images_in_sub_folders_is_flattened(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """HF's `{"file_name": "images/0.png"}` beside an `images/` folder was imported as the table
    alone: the folder skipped ("a sub-folder: import it on its own"), no image, every row naming
    nothing (RELIABILITY 1006). Now each named image is stored under its own name with its row;
    a name taken twice, a missing file and a link stay as they were, named."""
    src = tmp_path / "hub"
    (src / "images").mkdir(parents=True)
    (src / "more").mkdir()
    for stem, colour in (("0", "red"), ("1", "blue"), ("spare", "white")):
        Image.new("RGB", (32, 32), colour).save(src / "images" / f"{stem}.png")
    Image.new("RGB", (32, 32), "green").save(src / "more" / "0.png")
    (src / "images" / "link.png").symlink_to(src / "images" / "1.png")
    rows = [
        ("images/0.png", "a red square"),
        ("images/1.png", "a blue square"),
        ("more/0.png", "taken"),
        ("images/gone.png", "missing"),
        ("images/link.png", "a link"),
    ]
    (src / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": f, "text": t}) + "\n" for f, t in rows)
    )
    done = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "hub"])
    assert done.exit_code == 0, done.output
    assert "2 image(s) the caption table names in sub-folders stored under their own names" in done.output
    assert (
        "skipped the row of more/0.png (0.png is already taken by another image of the import)" in done.output
    )
    assert "skipped the row of images/link.png (a link or not a regular file (not followed))" in done.output
    assert "skipped 2 other file(s) of images/ (no caption table row names them)" in done.output
    dataset = settings.datasets_dir / "hub"
    assert sorted(p.name for p in dataset.iterdir()) == ["0.png", "1.png", "metadata.jsonl"]
    stored = [json.loads(line) for line in (dataset / "metadata.jsonl").read_text().splitlines()]
    assert stored[:2] == [
        {"file_name": "0.png", "text": "a red square"},
        {"file_name": "1.png", "text": "a blue square"},
    ]
    with Image.open(dataset / "0.png") as img:
        assert img.getpixel((0, 0)) == (255, 0, 0)  # images/0.png, not more/0.png
