"""tests/endless_streams.py: an event stream read through starlette's TestClient fails at once
(before starlette 1.9 it never answered and hung the suite at the dependency floor: RELIABILITY
1281); other requests, and a stream's HEAD, go through."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from live_server import LOOPBACK


def test_an_event_stream_through_testclient_fails_at_once() -> None:
    app = FastAPI()

    @app.get("/api/info")
    def info() -> dict:
        return {"ok": True}

    with TestClient(app, base_url=LOOPBACK) as client:
        for url in ("/api/train/events", "/api/captions/events?after=0", f"{LOOPBACK}/api/models/events/"):
            with pytest.raises(AssertionError, match="RELIABILITY 1281"):
                client.stream("GET", url)
        with client.stream("GET", "/api/info") as answer:
            assert answer.read() == b'{"ok":true}'
        with client.stream("HEAD", "/api/train/events") as answer:  # headers alone: let through
            assert answer.status_code == 404  # (no such route in this app)
