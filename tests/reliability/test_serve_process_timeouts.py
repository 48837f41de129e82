"""serve_process's client (tests/reliability/reliability_helpers.py) reads a worker-starting POST's
answer for WORKER_TIMEOUT_S like the live server's client: it gave every request 30 s, and
test_generation_worker's first generation (a cold worker importing torch and loading the model on
a real `lorastudio serve`) ran past it at load ~10 on the 2-core host (httpx.ReadTimeout)."""

from __future__ import annotations

import httpx
from reliability_helpers import served_client

from live_server import CLIENT_TIMEOUT_S, WORKER_TIMEOUT_S


def test_a_served_studios_client_waits_for_a_workers_start_and_not_longer_elsewhere() -> None:
    reads: list[tuple[str, str, float | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        reads.append((request.method, request.url.path, request.extensions["timeout"]["read"]))
        return httpx.Response(200, json={})

    with served_client(1, transport=httpx.MockTransport(answer)) as client:
        client.post("/api/generate", json={})
        client.post("/api/train/start", json={})
        client.get("/api/info")
        client.post("/api/train/preflight", json={})
    with served_client(1, 300.0, transport=httpx.MockTransport(answer)) as client:
        client.post("/api/generate", json={})  # a test's own longer timeout stands
    assert reads == [
        ("POST", "/api/generate", WORKER_TIMEOUT_S),
        ("POST", "/api/train/start", WORKER_TIMEOUT_S),
        ("GET", "/api/info", CLIENT_TIMEOUT_S),
        ("POST", "/api/train/preflight", CLIENT_TIMEOUT_S),
        ("POST", "/api/generate", 300.0),
    ]
