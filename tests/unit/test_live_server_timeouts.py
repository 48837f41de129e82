"""The live test server's client (tests/live_server.py) waits CLIENT_TIMEOUT_S for an answer, but
WORKER_TIMEOUT_S for a request that starts or waits on a worker: a cold generation worker on a
loaded 2-core CI host took past the 30 s every request had (test_api_generate_references)."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from live_server import CLIENT_TIMEOUT_S, WORKER_TIMEOUT_S, live_server


def test_worker_routes_get_the_worker_read_timeout_and_others_keep_the_short_one() -> None:
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    def anything(path: str) -> dict[str, str]:
        return {"path": path}

    sent: list[tuple[str, str, float | None]] = []

    def record(request: httpx.Request) -> None:  # runs after live_server's own hooks
        sent.append((request.method, request.url.path, request.extensions["timeout"]["read"]))

    with live_server(app) as server:
        server.client.event_hooks["request"].append(record)
        for path in ("/api/generate", "/api/train/start", "/api/runs/r1/resume", "/api/datasets/d/caption"):
            assert server.client.post(path).json() == {"path": path.lstrip("/")}
        server.client.get("/api/generate")
        server.client.post("/api/train/preflight")
        server.client.post("/api/generate/references")
        server.client.post("/api/runs/r1/resume", timeout=5)  # a call's own timeout stands
    assert WORKER_TIMEOUT_S > CLIENT_TIMEOUT_S
    assert sent == [
        ("POST", "/api/generate", WORKER_TIMEOUT_S),
        ("POST", "/api/train/start", WORKER_TIMEOUT_S),
        ("POST", "/api/runs/r1/resume", WORKER_TIMEOUT_S),
        ("POST", "/api/datasets/d/caption", WORKER_TIMEOUT_S),
        ("GET", "/api/generate", CLIENT_TIMEOUT_S),
        ("POST", "/api/train/preflight", CLIENT_TIMEOUT_S),
        ("POST", "/api/generate/references", CLIENT_TIMEOUT_S),
        ("POST", "/api/runs/r1/resume", 5),
    ]
