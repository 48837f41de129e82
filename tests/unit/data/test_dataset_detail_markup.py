"""A dataset's detail (data/dataset_detail.py, GET /api/datasets/{name}) names each caption that a
fresh run refuses for another trainer's markup (RELIABILITY 1830): before, a caption holding
`{trigger}` or kohya's `|||` was listed as written with nothing said, so the user learnt of it
only from the Train form's refusal."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from lorastudio.data.captions import unread_markup
from lorastudio.data.dataset_detail import dataset_detail


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), 128).save(buf, format="PNG")
    return buf.getvalue()


def test_each_caption_with_unread_markup_is_named_with_the_runs_words(tmp_path: Path) -> None:
    captions = {
        "a": "{trigger}, a red square",
        "b": "red, square ||| blue",
        "c": "[trigger] a plain one",  # the studio's own placeholder: read, not markup
        "d": None,  # no caption
    }
    for stem, text in captions.items():
        (tmp_path / f"{stem}.png").write_bytes(_png())
        if text is not None:
            (tmp_path / f"{stem}.txt").write_text(text, encoding="utf-8")
    (tmp_path / "e.png").write_bytes(_png())  # a metadata.jsonl row is read as the run reads it
    (tmp_path / "metadata.jsonl").write_text('{"file_name": "e.png", "text": "<trigger> in a row"}\n')
    detail = dataset_detail(tmp_path)
    markup = {f["file"]: f["markup"] for f in detail["files"]}
    assert markup == {
        "a.png": unread_markup("{trigger}, a red square"),
        "b.png": unread_markup("red, square ||| blue"),
        "c.png": None,
        "d.png": None,
        "e.png": unread_markup("<trigger> in a row"),
    }
    assert "{trigger}" in markup["a.png"] and "|||" in markup["b.png"]  # type: ignore[operator]
    assert detail["dropped"] == []  # not a dropped file: the run refuses it, it does not leave it out
    page = dataset_detail(tmp_path, offset=1, limit=1)  # the page's captions only
    assert [(f["file"], f["markup"]) for f in page["files"]] == [("b.png", markup["b.png"])]
