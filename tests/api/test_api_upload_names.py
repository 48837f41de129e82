"""Upload requests on a real server (uvicorn in a thread): a body that is not multipart is a 400
saying so (not a 500), names are stored in Unicode NFC, and names with invisible or bidi
control characters are refused with the character named, nothing written."""

from __future__ import annotations

import io
import os
import unicodedata

from api_helpers import LiveServer
from PIL import Image

from lorastudio.settings import Settings


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, format="PNG")
    return buf.getvalue()


def test_an_upload_that_is_not_multipart_is_a_400(server: LiveServer, settings: Settings) -> None:
    client = server.client
    for headers in ({}, {"Content-Type": "application/json"}, {"Content-Type": "multipart/form-data"}):
        resp = client.post("/api/datasets/set/files", content=b'{"a": 1}', headers=headers)
        assert resp.status_code == 400, (headers, resp.status_code, resp.text)
        assert "multipart/form-data" in resp.json()["detail"], resp.text
    assert not (settings.datasets_dir / "set").exists()


def test_names_are_stored_in_nfc(server: LiveServer, settings: Settings) -> None:
    client = server.client
    dataset = unicodedata.normalize("NFD", "Café")
    image = unicodedata.normalize("NFD", "résumé.png")
    caption = unicodedata.normalize("NFD", "résumé.txt")
    files = [("files", (image, _png())), ("files", (caption, b"a caption"))]
    resp = client.post(f"/api/datasets/{dataset}/files", files=files)
    assert resp.status_code == 201, resp.text
    assert os.listdir(settings.datasets_dir) == ["Caf\u00e9"]
    assert sorted(os.listdir(settings.datasets_dir / "Caf\u00e9")) == [
        "r\u00e9sum\u00e9.png",
        "r\u00e9sum\u00e9.txt",
    ]
    # either form reaches the same files
    for name in (dataset, "Caf\u00e9"):
        detail = client.get(f"/api/datasets/{name}").json()
        assert [f["file"] for f in detail["files"]] == ["r\u00e9sum\u00e9.png"]
        assert detail["files"][0]["caption"] == "a caption"
    assert client.get(f"/api/datasets/Caf\u00e9/thumbnails/{image}").status_code == 200


def test_names_with_invisible_or_bidi_characters_are_refused(server: LiveServer, settings: Settings) -> None:
    client = server.client
    for bad in ("inv\u202egnp.exe", "a\u200bb", "\ufeffname", "x\u2066y\u2069"):
        resp = client.post("/api/datasets/clean/files", files=[("files", (f"{bad}.png", _png()))])
        assert resp.status_code == 400, (bad, resp.text)
        assert "U+" in resp.text and "invisible" in resp.text, resp.text
        resp = client.post(f"/api/datasets/{bad}/files", files=[("files", ("ok.png", _png()))])
        assert resp.status_code == 400, (bad, resp.text)
        assert "U+" in resp.json()["detail"], resp.text
    assert [p.name for p in settings.datasets_dir.iterdir() if not p.name.startswith(".")] == []
