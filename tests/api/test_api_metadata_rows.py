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
