"""An image's metadata.jsonl row goes with it: found from outside, a deleted image's row stayed, and
a new upload of the same name came back with the old caption; a caption cleared through the API
came back as the metadata row's."""

from __future__ import annotations

import io
import json

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.settings import Settings


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), "red").save(buf, format="PNG")
    return buf.getvalue()


def _captions(client: TestClient) -> dict[str, str | None]:
    detail = client.get("/api/datasets/rows")
    assert detail.status_code == 200, detail.text
    return {img["file"]: img["caption"] for img in detail.json()["files"]}


def test_an_images_metadata_row_goes_with_its_delete_and_its_cleared_caption(
    client: TestClient, settings: Settings
) -> None:
    files = [("f", (name, _png())) for name in ("a.png", "b.png", "c.png")]
    assert client.post("/api/datasets/rows/files", files=files).status_code == 201
    table = settings.datasets_dir / "rows" / "metadata.jsonl"
    rows = [{"file_name": "a.png", "text": "old a"}, {"file_name": "./b.png", "text": "old b"}]
    rows.append({"file_name": "c.png", "text": "kept c", "extra": 1})
    table.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json, kept as it is\n")
    assert _captions(client) == {"a.png": "old a", "b.png": "old b", "c.png": "kept c"}

    cleared = client.put("/api/datasets/rows/captions/a.png", json={"caption": ""})
    assert cleared.status_code == 200, cleared.text
    assert _captions(client)["a.png"] is None  # not the row's "old a"

    deleted = client.delete("/api/datasets/rows/images/b.png").json()["deleted"]
    assert deleted == ["b.png", "metadata.jsonl row of b.png"]
    assert client.post("/api/datasets/rows/files", files=[("f", ("b.png", _png()))]).status_code == 201
    assert _captions(client) == {"a.png": None, "b.png": None, "c.png": "kept c"}
    lines = table.read_text().splitlines()
    assert lines == [json.dumps(rows[2]), "not json, kept as it is"]  # the rest byte for byte


def test_a_caption_edit_writes_the_caption_file_the_dataset_reads(
    client: TestClient, settings: Settings
) -> None:
    """A dataset reads `<stem>.txt` in any case (`a.TXT`, as a Windows tool saves it), but an edit
    wrote (and checked its `expected` against, and a clear or delete removed) `a.txt` only: the
    edit was refused as a conflict with the caption shown, or written to a file the scan then
    dropped as a second caption ("a.TXT is used"). An edit now uses the file the scan reads."""
    assert client.post(
        "/api/datasets/rows/files", files=[("f", (n, _png())) for n in ("a.png", "b.png")]
    ).is_success
    folder = settings.datasets_dir / "rows"
    (folder / "a.TXT").write_text("from a Windows tool")
    (folder / "b.Txt").write_text("b first")
    detail = client.get("/api/datasets/rows").json()
    assert _captions(client) == {"a.png": "from a Windows tool", "b.png": "b first"}
    edit = {"caption": "edited", "expected": "from a Windows tool"}
    answer = client.put("/api/datasets/rows/captions/a.png", json=edit)
    assert answer.status_code == 200, answer.text
    assert _captions(client)["a.png"] == "edited"
    assert sorted(p.name for p in folder.iterdir() if p.suffix.lower() == ".txt") == ["a.TXT", "b.Txt"]
    assert client.put("/api/datasets/rows/captions/a.png", json={"caption": ""}).status_code == 200
    assert _captions(client)["a.png"] is None and not (folder / "a.TXT").exists()
    assert client.delete("/api/datasets/rows/images/b.png").json()["deleted"] == ["b.png", "b.Txt"]
    assert detail["dropped"] == []
