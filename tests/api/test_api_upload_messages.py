"""An upload refused for a file's content names that file, never the studio's internals (a file
object's repr, the staging folder: issue 30)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url=LOOPBACK) as test_client:
        yield test_client


def test_an_unreadable_image_is_named_by_its_own_name(client: TestClient) -> None:
    resp = client.post("/api/datasets/notes/files", files=[("files", ("holiday.png", b"hello world" * 10))])
    assert 400 <= resp.status_code < 500, resp.text
    text = resp.text
    assert "holiday.png" in text
    for leak in ("_io.", "BufferedReader", ".uploads", "name="):
        assert leak not in text, text
