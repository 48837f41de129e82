"""A real uvicorn server for tests: `live_server(app)` serves a FastAPI app on 127.0.0.1 (a free
port) in a thread and yields a LiveServer with an httpx client bound to it (CLIENT_TIMEOUT_S; the
requests that start or wait on a worker WORKER_TIMEOUT_S to read their answer)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import uvicorn
from fastapi import FastAPI

from lorastudio.api.app import KEEP_ALIVE_S

# The base URL of in-process TestClients: a Host the server answers (TestClient's default,
# "testserver", is not a loopback name and is refused with 421: api/hosts.py).
LOOPBACK = "http://127.0.0.1"

CLIENT_TIMEOUT_S = 30.0  # every request of the live client: a hung route fails the test soon
# A request that starts a worker process or waits on one (a generation, a training or caption
# job's start): a cold worker imports torch and loads the model, which on a loaded 2-core CI host
# took past 30 s. Also what the browser tests wait for a generated image (tests/e2e).
WORKER_TIMEOUT_S = 120.0
_WORKER_ROUTES = re.compile(r"/api/(generate|train/start|runs/[^/]+/resume|datasets/[^/]+/caption)")


def worker_timeout(request: httpx.Request) -> None:
    """httpx request hook: WORKER_TIMEOUT_S to read the answer of a POST to a route that starts
    or waits on a worker (`_WORKER_ROUTES`), unless the call chose its own timeout."""
    own = request.extensions.get("timeout") != httpx.Timeout(CLIENT_TIMEOUT_S).as_dict()
    if request.method == "POST" and _WORKER_ROUTES.fullmatch(request.url.path) and not own:
        request.extensions["timeout"] = httpx.Timeout(CLIENT_TIMEOUT_S, read=WORKER_TIMEOUT_S).as_dict()


@dataclass
class LiveServer:
    app: FastAPI
    url: str
    client: httpx.Client


@contextmanager
def live_server(app: FastAPI) -> Iterator[LiveServer]:
    """Serve `app` with uvicorn on 127.0.0.1 (a free port) until the block ends. The listen
    backlog is large so load tests' bursts of connections are not refused."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        backlog=1024,
        timeout_keep_alive=KEEP_ALIVE_S,  # as `lorastudio serve`
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(
        base_url=url, timeout=CLIENT_TIMEOUT_S, event_hooks={"request": [worker_timeout]}
    ) as client:
        try:
            yield LiveServer(app, url, client)
        finally:
            server.should_exit = True
            thread.join(30)
