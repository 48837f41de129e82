"""A blank .txt beside a metadata.jsonl row (RELIABILITY 2070): the run's scan takes the row (a
blank .txt is no caption: captions.choose_caption), so the dataset's listing, detail, bulk edit and
an edit's conflict check read the row too (captions.own_caption). Before, each took the blank .txt
as the image's caption: the listing counted no markup in a row the run refused, the detail showed
no caption (nor its markup) for the image the run named, a bulk `--find` left that row as it was
and an edit from the detail's caption was a conflict."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.data import markup_count
from lorastudio.data.caption_bulk import CaptionEdit, bulk_edit_captions
from lorastudio.data.dataset_detail import dataset_detail
from lorastudio.data.image_edits import write_caption
from lorastudio.data.listing import dataset_summary
from lorastudio.data.scan import scan_dataset
from lorastudio.errors import DatasetError


def _dataset(folder: Path) -> Path:
    """a: a blank .txt and a row with kohya's markup; b: a white-space .txt and a clean row;
    c: its own .txt."""
    folder.mkdir()
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), 128).save(buf, format="PNG")
    for stem in "abc":
        (folder / f"{stem}.png").write_bytes(buf.getvalue())
    (folder / "a.txt").write_text("", encoding="utf-8")
    (folder / "b.txt").write_text("  \n", encoding="utf-8")
    (folder / "c.txt").write_text("c's own", encoding="utf-8")
    rows = '{"file_name": "a.png", "text": "red ||| blue"}\n{"file_name": "b.png", "text": "b in a row"}\n'
    (folder / "metadata.jsonl").write_text(rows, encoding="utf-8")
    return folder


def test_a_blank_txt_s_row_is_the_caption_everywhere_the_run_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(markup_count, "SETTLED_NS", -1)  # the files just written count as settled
    root = _dataset(tmp_path / "d")
    with pytest.raises(DatasetError) as refused:  # the run: a's row trains, and it holds markup
        scan_dataset(root, resolution=32, multiple=16)
    assert [p for p in refused.value.problems if p.startswith("a.png")], refused.value.problems
    assert dataset_summary(root)["markup_captions"] == 1  # before: 0 (the blank .txt read alone)
    shown = {f["file"]: f for f in dataset_detail(root)["files"]}
    assert shown["a.png"]["caption"] == "red ||| blue" and shown["a.png"]["markup"]  # before: None
    assert shown["b.png"]["caption"] == "b in a row" and shown["c.png"]["caption"] == "c's own"

    edited = bulk_edit_captions(root, CaptionEdit(find=" ||| ", replace=", "))
    assert edited.changed == ["a.png"]  # before: nothing (a's caption read as none)
    assert dataset_summary(root)["markup_captions"] == 0
    scan = scan_dataset(root, resolution=32, multiple=16)
    assert [it.caption for it in scan.items] == ["red, blue", "b in a row", "c's own"]

    # an edit from the caption the detail showed is no conflict (before: "it is now ''")
    write_caption(root, "b.png", "b by hand", expected="b in a row")
    assert scan_dataset(root, resolution=32, multiple=16).items[1].caption == "b by hand"


def test_the_listing_counts_a_blank_txt_or_row_as_no_caption(tmp_path: Path) -> None:
    """RELIABILITY 2071: the listing's `captions` (the Datasets list's "images without a caption"
    mark, 1912) counted a blank .txt and a blank row as captions, which the run's scan reads as
    none ("images without a caption": refused without a trigger word or default caption)."""
    root = _dataset(tmp_path / "d")  # a, b: a blank .txt and a row; c: its own .txt
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), 128).save(buf, format="PNG")
    for stem in "de":
        (root / f"{stem}.png").write_bytes(buf.getvalue())
    (root / "d.txt").write_text(" \n", encoding="utf-8")  # blank, no row
    with (root / "metadata.jsonl").open("a", encoding="utf-8") as fh:
        fh.write('{"file_name": "e.png", "text": "  "}\n')  # no .txt, a blank row
    with pytest.raises(DatasetError) as refused:
        scan_dataset(root, resolution=32, multiple=16)
    uncaptioned = [p.split(":")[0] for p in refused.value.problems if ": no caption" in p]
    assert uncaptioned == ["d.png", "e.png"], refused.value.problems
    summary = dataset_summary(root)
    assert (summary["images"], summary["captions"]) == (5, 3)  # before: 5 captions
