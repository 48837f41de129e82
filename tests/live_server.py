"""A real uvicorn server for tests: `live_server(app)` serves a FastAPI app on 127.0.0.1 (a free
port) in a thread and yields a LiveServer with an httpx client bound to it."""

from __future__ import annotations

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
    with httpx.Client(base_url=url, timeout=30) as client:
        try:
            yield LiveServer(app, url, client)
        finally:
            server.should_exit = True
            thread.join(30)
