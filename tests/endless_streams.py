"""No test reads an endless event stream through starlette's TestClient (RELIABILITY 1281).

Before starlette 1.9 (the floor is 1.6) the TestClient runs the app to the end of its response
before answering, so `client.stream("GET", ".../events")` never answered there and hung its
xdist worker, and the whole run, at the dependency floor (`bash scripts/check_deps.sh floors`),
while it passed at the newest. `guard()` makes such a call fail at once on every starlette: read
the streams from a real uvicorn (the `server` fixture, tests/live_server.py).
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

_ENDLESS = ("/api/train/events", "/api/captions/events", "/api/models/events")


def endless(method: str, url: Any) -> bool:
    """Whether a request is a GET of an event stream (HEAD ends: headers alone)."""
    path = str(url).split("?", 1)[0].rstrip("/")
    return method.upper() == "GET" and path.endswith(_ENDLESS)


def guard() -> None:
    """Patch TestClient.stream to refuse an endless stream (idempotent)."""
    if getattr(TestClient.stream, "_endless_guard", False):
        return
    real = TestClient.stream

    def stream(self: TestClient, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        if endless(method, url):
            raise AssertionError(
                f"{method} {url} through TestClient: an endless stream hangs before starlette 1.9 "
                "(RELIABILITY 1281); read it from the `server` fixture (a real uvicorn)"
            )
        return real(self, method, url, *args, **kwargs)

    stream._endless_guard = True  # type: ignore[attr-defined]
    TestClient.stream = stream  # type: ignore[method-assign]
