"""A metadata.jsonl row naming its image decomposed (NFD: e + U+0301, as macOS writes names) in an
upload or an import (session 40 attack audit): the upload stores every file under its NFC name
(data.paths.safe_component), and the row kept the NFD one, naming no file of the dataset, so the
image was stored uncaptioned, its caption lost without a word. Now the rows' names are stored as
the files are (RELIABILITY 2102); a folder read in place with such a row reads it as its image's
(2200, where 2105 refused it)."""

from __future__ import annotations

import io
import json
import unicodedata
from pathlib import Path

import pytest
from tests.unit.data.conftest import write_image

from lorastudio.data import scan_dataset
from lorastudio.data.uploads import UploadBatch
from lorastudio.errors import DatasetError

NFC, NFD = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))


def _png(tmp_path: Path, seed: int) -> io.BytesIO:
    """The bytes of a small PNG (write_image's)."""
    return io.BytesIO(write_image(tmp_path / f"source-{seed}.png", seed=seed).read_bytes())


def _rows(*rows: dict) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))


def test_a_row_naming_its_image_decomposed_captions_it_once_stored(tmp_path: Path) -> None:
    """Before: the image stored as `café.png` (NFC) with the row's `café.png` (NFD): the scan
    found it uncaptioned."""
    root = tmp_path / "datasets"
    root.mkdir()
    with UploadBatch(root, root / "ds", 10**6) as batch:
        batch.add(f"{NFD}.png", _png(tmp_path, 1))
        batch.add("plain.png", _png(tmp_path, 2))
        batch.add("metadata.jsonl", _rows({"file_name": f"./{NFD}.png", "text": "an accented caption", "x": 1},
                                          {"file_name": "plain.png", "text": "plain"}))  # fmt: skip
        assert sorted(batch.commit().stored) == [f"{NFC}.png", "metadata.jsonl", "plain.png"]
    scan = scan_dataset(root / "ds", resolution=64, multiple=16)
    assert sorted((it.path.name, it.caption) for it in scan.items) == [
        (f"{NFC}.png", "an accented caption"),
        ("plain.png", "plain"),
    ]
    rows = [json.loads(line) for line in (root / "ds" / "metadata.jsonl").read_text().splitlines()]
    assert {"file_name": f"./{NFC}.png", "text": "an accented caption", "x": 1} in rows  # the rest as written


def test_two_rows_naming_one_file_composed_and_decomposed_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    root.mkdir()
    with UploadBatch(root, root / "ds", 10**6) as batch:
        batch.add(f"{NFC}.png", _png(tmp_path, 1))
        batch.add("metadata.jsonl", _rows({"file_name": f"{NFC}.png", "text": "one"},
                                          {"file_name": f"{NFD}.png", "text": "two"}))  # fmt: skip
        result = batch.commit()
    (why,) = [why for name, why in result.refused if name == "metadata.jsonl"]
    assert "line 2" in why and "name one file (the same letters, composed and decomposed)" in why, why
    assert not (root / "ds" / "metadata.jsonl").exists()
    with pytest.raises(DatasetError):  # the image stays uncaptioned: said, not guessed
        scan_dataset(root / "ds", resolution=64, multiple=16)


@pytest.mark.parametrize(("image", "row"), [(NFD, NFC), (NFC, NFD)])
def test_a_folder_read_in_place_reads_a_row_naming_its_image_in_the_other_form(
    tmp_path: Path, image: str, row: str
) -> None:
    """A folder copied from macOS (NFD names) with rows written elsewhere (NFC), or the other way:
    the row was "listed in metadata.jsonl but not found" among the files not used and the image
    trained on the trigger word alone (RELIABILITY 2105, which refused it since). Now the row is
    the image's, a note naming both spellings by their code points (2200; test_spelt_rows.py)."""
    write_image(tmp_path / f"{image}.png")
    write_image(tmp_path / "b.png", seed=1)
    (tmp_path / "metadata.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ({"file_name": f"{row}.png", "text": "x"},
                                                                    {"file_name": "b.png", "text": "b"}))
    )  # fmt: skip
    scan = scan_dataset(tmp_path, resolution=64, multiple=16, trigger_word="sks")
    assert {it.path.name: it.caption for it in scan.items} == {f"{image}.png": "sks, x", "b.png": "sks, b"}
    (note,) = [why for name, why in scan.dropped if name == "metadata.jsonl"]
    assert f"the row {ascii(row + '.png')} is read as {image}.png's" in note and ascii(image + ".png") in note
