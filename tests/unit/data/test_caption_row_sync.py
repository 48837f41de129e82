"""RELIABILITY 1735: a caption written to an image's .txt (the Datasets page's edit, a caption
job) left the image's metadata.jsonl row with its old text: a second caption, which the scan
now names as unused (fix 1731). The row now gets the new text, its other keys kept."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from lorastudio.captioning.targets import CaptionWriter
from lorastudio.data import scan_dataset
from lorastudio.data.caption_bulk import CaptionEdit, bulk_edit_captions
from lorastudio.data.image_edits import write_caption


def _dataset(root: Path) -> Path:
    root.mkdir()
    for stem in ("a", "b", "c"):
        Image.new("RGB", (32, 32), "red").save(root / f"{stem}.png")
    (root / "c.txt").write_text("c's own", encoding="utf-8")
    rows = [
        {"file_name": "a.png", "text": "old a", "repeats": 3},
        {"file_name": "b.png", "text": "   "},  # a blank caption: no caption, left as it is
    ]
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def _rows(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (root / "metadata.jsonl").read_text(encoding="utf-8").splitlines()]


def test_a_caption_edit_gives_the_images_metadata_row_the_new_text(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "d")
    write_caption(root, "a.png", "new a")
    write_caption(root, "b.png", "new b")
    assert _rows(root) == [
        {"file_name": "a.png", "text": "new a", "repeats": 3},
        {"file_name": "b.png", "text": "   "},
    ]
    assert (root / "a.txt").read_text(encoding="utf-8") == "new a\n"
    scan = scan_dataset(root, resolution=32, multiple=16)
    assert [it.caption for it in scan.items] == ["new a", "new b", "c's own"] and scan.dropped == []


def test_a_caption_jobs_txt_captions_reach_their_rows_in_one_rewrite(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "d")
    writer = CaptionWriter(root, "txt", clock=lambda: 0.0)
    for stem in ("a", "b", "c"):
        writer.write(root / f"{stem}.png", f"job {stem}")
    assert _rows(root)[0]["text"] == "old a"  # queued, not rewritten per image
    writer.flush()
    assert writer.rewrites == 1
    assert _rows(root) == [
        {"file_name": "a.png", "text": "job a", "repeats": 3},
        {"file_name": "b.png", "text": "   "},
    ]


def test_a_bulk_caption_edit_edits_the_row_beside_the_txt_too(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "d")
    (root / "a.txt").write_text("old a", encoding="utf-8")  # the .txt and its row agree
    bulk_edit_captions(root, CaptionEdit(prepend="sks, "))
    assert _rows(root)[0] == {"file_name": "a.png", "text": "sks, old a", "repeats": 3}
    assert (root / "a.txt").read_text(encoding="utf-8") == "sks, old a\n"
    assert scan_dataset(root, resolution=32, multiple=16, default_caption="b").dropped == []
