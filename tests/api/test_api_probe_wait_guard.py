"""Every API route is marked as one that must not wait for the GPU probe in a request thread
(api/host_wait.no_probe_waits, hardware.forbid_probe_waits) until it awaited the answer
(HOST_KNOWN): a route that reaches host_info() without it is refused under the suite's
STRICT_PROBE_WAITS and logged once on a server whose answer is not known yet (RELIABILITY 209)."""

from __future__ import annotations

import logging
import re
import threading

import pytest
from fastapi import APIRouter, Depends, FastAPI
from fastapi.testclient import TestClient

from live_server import LOOPBACK, LiveServer
from lorastudio.api import host_wait
from lorastudio.api.host_wait import HOST_KNOWN, no_probe_waits
from lorastudio.jobs import hardware


def _probe_app() -> FastAPI:
    """Routes that reach host_info() in their thread: without HOST_KNOWN, with it, and from a
    thread the route starts (threads outside the request inherit no mark)."""
    router = APIRouter()

    @router.get("/forgot")
    def forgot() -> dict:
        return {"device": hardware.host_info().device}

    @router.get("/awaited", dependencies=HOST_KNOWN)
    def awaited() -> dict:
        return {"device": hardware.host_info().device}

    @router.get("/background")
    def background() -> dict:
        seen: list[str] = []
        worker = threading.Thread(target=lambda: seen.append(hardware.host_info().device))
        worker.start()
        worker.join()
        return {"device": seen[0]}

    app = FastAPI()
    app.include_router(router, dependencies=[Depends(no_probe_waits)])
    return app


def test_every_api_route_is_marked(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every route of the API's schema, called with whatever input (answers of any status on an
    empty home; event streams closed after their headers: a real uvicorn's, as TestClient before
    starlette 1.9 never answers an endless stream, RELIABILITY 1281), passed the mark first."""
    client = server.client
    marked: list[str] = []

    def record(where: str) -> None:
        marked.append(where)
        hardware.forbid_probe_waits(where)

    monkeypatch.setattr(host_wait, "forbid_probe_waits", record)
    operations = [
        (method.upper(), path) for path, ops in server.app.openapi()["paths"].items() for method in ops
    ]
    assert len(operations) > 50
    for method, path in operations:
        url = re.sub(r"\{[^}]+\}", "nope", path)
        with client.stream(method, url) as answer:
            assert answer.status_code < 500, (method, path, answer.status_code)
    assert sorted(set(marked)) == sorted(f"{method} {path}" for method, path in operations)


def test_a_route_without_host_known_fails_under_the_strict_suite() -> None:
    assert hardware.STRICT_PROBE_WAITS  # set by tests/conftest.py for the whole suite
    with TestClient(_probe_app(), base_url=LOOPBACK) as client:
        with pytest.raises(hardware.ProbeWaitForbidden, match=r"GET /forgot .*HOST_KNOWN"):
            client.get("/forgot")
        assert client.get("/awaited").json() == {"device": hardware.host_info().device}
        assert client.get("/background").status_code == 200


def test_a_server_logs_once_where_a_route_would_wait(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside the suite the forgotten wait is not an error: the request is answered (after the
    probe), and the place is logged once while the answer is not known yet."""
    monkeypatch.setattr(hardware, "STRICT_PROBE_WAITS", False)
    monkeypatch.setattr(hardware, "known_host_info", lambda: None)  # as while a probe is due
    monkeypatch.setattr(hardware, "_waits_told", set())
    with (
        caplog.at_level(logging.WARNING, logger="lorastudio.jobs"),
        TestClient(_probe_app(), base_url=LOOPBACK) as c,
    ):
        for _ in range(3):
            assert c.get("/forgot").status_code == 200
        assert c.get("/background").status_code == 200
    told = [r.getMessage() for r in caplog.records if "waits for the GPU probe" in r.getMessage()]
    assert told == ["GET /forgot waits for the GPU probe in a request thread (no HOST_KNOWN)"]
