"""An upload refused for a file's content names that file, never the studio's internals (a file
object's repr, the staging folder: issue 30)."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_an_unreadable_image_is_named_by_its_own_name(client: TestClient) -> None:
    resp = client.post("/api/datasets/notes/files", files=[("files", ("holiday.png", b"hello world" * 10))])
    assert 400 <= resp.status_code < 500, resp.text
    text = resp.text
    assert "holiday.png" in text
    for leak in ("_io.", "BufferedReader", ".uploads", "name="):
        assert leak not in text, text
