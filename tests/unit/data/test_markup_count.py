"""The dataset listing counts the captions a fresh run refuses for another trainer's markup
(data/markup_count.py, RELIABILITY 1862): before, GET /api/datasets (the Datasets list, the Train
form's picker) listed such a dataset as usable with nothing said. The count is remembered per
folder and caption file version: an unchanged folder reads no caption again; a studio edit (staged,
then renamed) is seen at once, a rewrite in place at the next sweep (RESWEEP_S)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.data import markup_count
from lorastudio.data.listing import dataset_summary, list_datasets


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), 128).save(buf, format="PNG")
    return buf.getvalue()


def _dataset(folder: Path) -> None:
    folder.mkdir()
    captions = {
        "a": "{trigger}, a red square",
        "b": "red, square ||| blue",
        "c": "[trigger] plain",
        "d": None,
    }
    for stem, text in captions.items():
        (folder / f"{stem}.png").write_bytes(_png())
        if text is not None:
            (folder / f"{stem}.txt").write_text(text, encoding="utf-8")
    (folder / "e.png").write_bytes(_png())  # a row is read as the run reads it
    (folder / "f.png").write_bytes(_png())  # a .txt wins over its row: f's row is not read
    (folder / "f.txt").write_text("a clean caption", encoding="utf-8")
    rows = '{"file_name": "e.png", "text": "<trigger> in a row"}\n{"file_name": "f.png", "text": "x ||| y"}\n'
    (folder / "metadata.jsonl").write_text(rows, encoding="utf-8")


def test_the_listing_counts_captions_a_run_refuses_and_sees_each_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(markup_count, "SETTLED_NS", -1)  # the files just written count as settled
    _dataset(tmp_path / "pets")
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "a.png").write_bytes(_png())
    (tmp_path / "clean" / "a.txt").write_text("a cat", encoding="utf-8")
    listed = {d["name"]: d for d in list_datasets(tmp_path)}
    listed_at = (tmp_path / "pets").stat().st_mtime_ns  # the folder's version as listed
    assert listed["pets"]["markup_captions"] == 3 and listed["pets"]["captions"] == 5  # a, b, e
    assert listed["clean"]["markup_captions"] == 0

    reads: list[str] = []
    real = markup_count.read_sidecar
    monkeypatch.setattr(markup_count, "read_sidecar", lambda p: reads.append(p.name) or real(p))
    pets = tmp_path / "pets"
    assert dataset_summary(pets)["markup_captions"] == 3 and reads == []  # remembered: nothing read
    staged = pets / ".a.txt.tmp"  # a studio edit: staged, then renamed (the folder changes)
    staged.write_text("a red square", encoding="utf-8")
    os.replace(staged, pets / "a.txt")
    os.utime(pets, ns=(listed_at, listed_at + 10**9))  # a tick later (one coarse tick could stamp both)
    assert dataset_summary(pets)["markup_captions"] == 2 and reads == ["a.txt"]  # that file alone read
    with open(pets / "b.txt", "w", encoding="utf-8") as fh:  # an editor writing into the file
        fh.write("red, square, blue")
    monkeypatch.setattr(markup_count, "RESWEEP_S", -1.0)  # the next sweep is due
    assert dataset_summary(pets)["markup_captions"] == 1  # e's row alone
    (pets / "metadata.jsonl").write_text('{"file_name": "e.png", "text": "a row"}\n', encoding="utf-8")
    assert dataset_summary(pets)["markup_captions"] == 0


def test_a_metadata_jsonl_too_large_for_the_listing_is_said_not_counted(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RELIABILITY 2072: the listing does not read a metadata.jsonl over LISTING_METADATA_MAX (8
    MB, fix 1951), and its rows' markup was a silent 0; now `markup_counted` is false and `datasets
    list` says so. The bound is lowered here in place of writing 8 MB."""
    from cli_runner import run_cli_streams
    from lorastudio.settings import get_settings

    monkeypatch.setattr(markup_count, "SETTLED_NS", -1)
    root = get_settings().ensure_dirs().datasets_dir
    for name in ("small", "large"):
        (root / name).mkdir()
        (root / name / "a.png").write_bytes(_png())  # no .txt: its row is its caption
        (root / name / "metadata.jsonl").write_text(
            '{"file_name": "a.png", "text": "x ||| y"}\n', encoding="utf-8"
        )
    size = (root / "small" / "metadata.jsonl").stat().st_size
    with (root / "large" / "metadata.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("\n" * size)  # blank lines: the same rows, a larger file
    monkeypatch.setattr(markup_count, "LISTING_METADATA_MAX", size)
    listed = {d["name"]: d for d in list_datasets(root)}
    assert (listed["small"]["markup_captions"], listed["small"]["markup_counted"]) == (1, True)
    assert (listed["large"]["markup_captions"], listed["large"]["markup_counted"]) == (0, False)
    code, out, err = run_cli_streams(capsys, monkeypatch, "datasets", "list")
    assert code == 0, err
    assert "markup: 'large': the rows of its metadata.jsonl (over 8 MB) are not counted here" in out
    assert "markup: 'small': 1 caption(s)" in out and "'small': the rows" not in out
