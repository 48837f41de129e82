"""`lorastudio datasets import` of a Hugging Face `imagefolder` (session 31 wild-data audit): its
metadata.csv captions reach the dataset as metadata.jsonl rows (RELIABILITY 1002)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from PIL import Image
from typer.testing import CliRunner

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
