"""A write without the API token is refused before its body is read (api/token_gate.py,
RELIABILITY 1580): FastAPI parsed a route's JSON body (up to 4 MB, on the event loop) before
`require_token` ran, so a client without the token made the server parse its bodies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings

TOKEN = "tok-gate-123"
BROKEN = b'{"config": {"family": "flux", "steps": '  # not JSON: parsing it answers 422


def _client(home: Path) -> TestClient:
    """The app without its lifespan: a refusal here never reaches a route or a service."""
    return TestClient(create_app(Settings(home=home, api_token=TOKEN)), base_url=LOOPBACK)


def test_a_write_without_the_token_is_refused_before_its_body_is_parsed(tmp_path: Path) -> None:
    client = _client(tmp_path / "home")
    json_type = {"Content-Type": "application/json"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        for route in ("/api/train/preflight", "/api/generate", "/api/config/import", "/api/nowhere"):
            res = client.post(route, content=BROKEN, headers={**json_type, **headers})
            assert res.status_code == 401, (route, headers, res.text)  # was 422: the body parsed first
            assert res.json() == {"error": "Unauthorized", "detail": "missing or wrong API token"}
            assert res.headers["www-authenticate"] == "Bearer"
    res = client.post("/api/train/preflight", content=BROKEN, params={"token": TOKEN}, headers=json_type)
    assert res.status_code == 401  # ?token= stands on GETs only, as before
    # a cookie on a write: no credential there, as before
    res = client.put("/api/datasets/d/captions/a.png", content=BROKEN, headers={**json_type, "Cookie": "x=1"})
    assert res.status_code == 401
    # with the token the body is read as before (its parse error answered)
    res = client.post(
        "/api/train/preflight", content=BROKEN, headers={**json_type, "Authorization": f"Bearer {TOKEN}"}
    )
    assert res.status_code == 422 and res.json()["detail"][0]["type"] == "json_invalid"
    # the other guards still answer first: a cross-origin write is 403 without a token too
    res = client.post("/api/train/stop", json={}, headers={"Origin": "http://evil.example"})
    assert res.status_code == 403


def test_the_refused_body_is_never_received(tmp_path: Path) -> None:
    """At the ASGI level: the app answers 401 without one call of `receive` (a slow or huge body
    costs the server nothing), and asks the connection to close."""
    app = create_app(Settings(home=tmp_path / "home", api_token=TOKEN))
    received: list[object] = []
    sent: list[dict] = []

    async def receive() -> dict:
        received.append(1)
        return {"type": "http.request", "body": BROKEN, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/train/preflight",
        "raw_path": b"/api/train/preflight",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", b"40"),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 401 and not received
    assert (b"connection", b"close") in sent[0]["headers"]
