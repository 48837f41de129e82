"""Text that has no UTF-8 in a dataset (session 41 new-code audit): JSON may escape a lone
surrogate ("\\ud83d", half of an emoji's UTF-16 pair: a caption cut by a tool counting UTF-16
units), and Python holds a file name in bytes that are not UTF-8 (Latin-1, an old system's) as
lone surrogates. Each reached an `.encode("utf-8")` past every handler: a UnicodeEncodeError
traceback (a 500 of the upload, the run's scan) where the studio names a bad line or file
(RELIABILITY 2220, 2221, 2222)."""

from __future__ import annotations

import io
import json
import os
import unicodedata
from pathlib import Path

import pytest
from tests.unit.data.conftest import write_image

from lorastudio.data import scan_dataset
from lorastudio.data.captions import read_metadata
from lorastudio.data.uploads import UploadBatch
from lorastudio.errors import DatasetError

NFC, NFD = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
CUT = '"cut \\ud83d emoji"'  # a JSON string holding a lone (high) surrogate, as written in the file


def _png(tmp_path: Path, seed: int) -> io.BytesIO:
    return io.BytesIO(write_image(tmp_path / f"source-{seed}.png", seed=seed).read_bytes())


def test_a_caption_holding_a_lone_surrogate_is_a_bad_line_named(tmp_path: Path) -> None:
    """Before: UnicodeEncodeError from the caption's size check (read_metadata), in the upload and
    in the scan of the folder read in place (2220)."""
    table = tmp_path / "in-place" / "metadata.jsonl"
    table.parent.mkdir()
    write_image(table.parent / "a.png")
    table.write_text(f'{{"file_name": "a.png", "text": {CUT}}}\n', encoding="ascii")
    said = '"text" of a.png holds \\ud83d, half of a UTF-16 pair that names no character'
    assert read_metadata(table).problems == [f"metadata.jsonl line 1: {said}"]
    with pytest.raises(DatasetError) as err:
        scan_dataset(table.parent, resolution=64, multiple=16, trigger_word="sks")
    assert f"metadata.jsonl line 1: {said}" in err.value.problems
    root = tmp_path / "datasets"
    root.mkdir()
    with UploadBatch(root, root / "ds", 10**6) as batch:
        batch.add("a.png", _png(tmp_path, 1))
        batch.add("metadata.jsonl", io.BytesIO(table.read_bytes()))
        result = batch.commit()
    (why,) = [why for name, why in result.refused if name == "metadata.jsonl"]
    assert said in why, why


def test_a_row_keeping_a_lone_surrogate_elsewhere_is_stored_in_nfc_and_merged(tmp_path: Path) -> None:
    """The row's other keys are kept as written; its NFD name stored in NFC (2102) and a later
    upload's merge wrote it with ensure_ascii=False, then UTF-8: UnicodeEncodeError (2221)."""
    root = tmp_path / "datasets"
    root.mkdir()
    row = f'{{"file_name": "{NFD}.png", "text": "accented", "note": {CUT}}}\n'
    with UploadBatch(root, root / "ds", 10**6) as batch:
        batch.add(f"{NFD}.png", _png(tmp_path, 1))
        batch.add("metadata.jsonl", io.BytesIO(row.encode("utf-8")))
        assert sorted(batch.commit().stored) == [f"{NFC}.png", "metadata.jsonl"]
    with UploadBatch(root, root / "ds", 10**6) as batch:  # a second batch: merged with the first's rows
        batch.add("plain.png", _png(tmp_path, 2))
        batch.add("metadata.jsonl", io.BytesIO(b'{"file_name": "plain.png", "text": "plain"}\n'))
        assert sorted(batch.commit().stored) == ["metadata.jsonl", "plain.png"]
    rows = [json.loads(line) for line in (root / "ds" / "metadata.jsonl").read_text("utf-8").splitlines()]
    assert {"file_name": f"{NFC}.png", "text": "accented", "note": "cut \ud83d emoji"} in rows
    scan = scan_dataset(root / "ds", resolution=64, multiple=16)
    assert sorted((it.path.name, it.caption) for it in scan.items) == [
        (f"{NFC}.png", "accented"),
        ("plain.png", "plain"),
    ]


def test_an_image_named_in_latin1_is_left_out_naming_the_byte(tmp_path: Path) -> None:
    """A folder read in place holding `caf\\xe9.png` (Latin-1): the image was scanned, then the
    dataset's fingerprint raised UnicodeEncodeError, so no run of the folder started (2222). Now it
    is a file not used, named with the byte; the others train."""
    write_image(tmp_path / "b.png", seed=1)
    latin1 = os.fsdecode(b"caf\xe9.png")
    write_image(tmp_path / latin1, seed=2)
    scan = scan_dataset(tmp_path, resolution=64, multiple=16, trigger_word="sks")
    assert [it.path.name for it in scan.items] == ["b.png"]
    assert (latin1, "the name is not UTF-8 text (byte 0xe9 at 3): rename it to use the file") in scan.dropped
    (tmp_path / "b.png").unlink()
    with pytest.raises(DatasetError, match="no images") as err:
        scan_dataset(tmp_path, resolution=64, multiple=16, trigger_word="sks")
    assert any("byte 0xe9 at 3" in p for p in err.value.problems)
