"""Deleting a gallery image: DELETE /api/gallery/<file> removes the PNG and its settings
sidecar (nothing else: another image, the uploaded references); an unknown, non-PNG, hidden or
linked name is a 404 and a hidden name or one with a path in it is refused, each leaving every file."""

from __future__ import annotations

import io
import json
from pathlib import Path

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.settings import Settings


def _image(folder: Path, stem: str) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "blue").save(buf, format="PNG")
    (folder / f"{stem}.png").write_bytes(buf.getvalue())
    (folder / f"{stem}.json").write_text(json.dumps({"prompt": f"{stem} prompt", "seed": 1}))


def test_delete_removes_the_image_and_its_settings_only(settings: Settings, client: TestClient) -> None:
    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True)
    _image(gallery, "one")
    _image(gallery, "two")
    (gallery / "references").mkdir()
    (gallery / "references" / "ref.png").write_bytes(b"x")
    (gallery / "linked.png").symlink_to(gallery / "two.png")
    assert {i["file"] for i in client.get("/api/gallery").json()["images"]} == {"one.png", "two.png"}

    gone = client.delete("/api/gallery/one.png")
    assert gone.status_code == 200, gone.text
    assert gone.json() == {"deleted": ["one.png", "one.json"]}
    assert [i["file"] for i in client.get("/api/gallery").json()["images"]] == ["two.png"]
    assert sorted(p.name for p in gallery.iterdir()) == ["linked.png", "references", "two.json", "two.png"]

    for name in ("one.png", "two.json", "linked.png", "nope.png"):
        assert client.delete(f"/api/gallery/{name}").status_code == 404, name
    for name in (".hidden.png", "..%2Ftwo.png"):  # not a plain file name
        assert client.delete(f"/api/gallery/{name}").status_code in (400, 404), name
    assert sorted(p.name for p in gallery.iterdir()) == ["linked.png", "references", "two.json", "two.png"]
