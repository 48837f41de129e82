"""The event streams' caps (api/sse_slots.py, RELIABILITY 1770): a client past its streams gets
429 naming the limit, the server past its total 503, a closed stream gives its slot back, and a
stream that sent no event for SSE_IDLE_CLOSE_S ends on its own. Read from a real uvicorn (the
`server` fixture; see test_api_sse.py for why not TestClient)."""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from live_server import LiveServer, live_server
from lorastudio.api import sse
from lorastudio.api.app import create_app
from lorastudio.api.sse_slots import StreamSlots
from lorastudio.event_log import EventLog
from lorastudio.settings import Settings


def _request() -> Request:
    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never disconnects on its own
        return {"type": "http.disconnect"}

    return Request({"type": "http", "method": "GET", "path": "/", "headers": []}, receive)


_LINES: list = []  # each open stream's line iterator (one dropped closes its stream)


def _open(stack: ExitStack, client: httpx.Client, path: str) -> httpx.Response:
    resp = stack.enter_context(client.stream("GET", path))
    if resp.status_code == 200:
        _LINES.append(lines := resp.iter_lines())
        next(lines)  # ": connected": the server holds it now
    else:
        resp.read()
    return resp


@pytest.mark.timeout(60)
def test_streams_past_a_clients_cap_and_the_servers_are_refused_naming_the_limit(server: LiveServer) -> None:
    server.app.state.sse_slots = slots = StreamSlots(per_client=2, total=3)
    with ExitStack() as stack:
        first = _open(stack, server.client, "/api/train/events")
        second = _open(stack, server.client, "/api/models/events")
        assert (first.status_code, second.status_code) == (200, 200)
        refused = _open(stack, server.client, "/api/captions/events")
        assert refused.status_code == 429, refused.text
        body = refused.json()
        assert body["error"] == "TooManyStreams" and body["limit"] == 2
        assert "SSE_MAX_PER_CLIENT" in body["detail"] and refused.headers["retry-after"] == "5"
        slots.per_client = 5
        assert _open(stack, server.client, "/api/train/events").status_code == 200
        full = _open(stack, server.client, "/api/train/events")
        assert full.status_code == 503 and full.json()["limit"] == 3, full.text
        _LINES.pop(0)
        first.close()
        deadline = time.monotonic() + 20  # the server sees the client go (a bound, not a timing)
        while sum(slots.held.values()) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _open(stack, server.client, "/api/train/events").status_code == 200
    _LINES.clear()


@pytest.mark.timeout(60)
def test_behind_one_proxy_address_each_browser_session_holds_its_own_share(settings: Settings) -> None:
    """RELIABILITY 2290: behind a reverse proxy every browser is the proxy's address, so all its
    users' tabs together held one client's share (SSE_MAX_PER_CLIENT) and the next was refused.
    Now a stream carrying a live session cookie counts under that session; a made-up cookie (with
    the bearer: without it, 401) counts under the address, and the server's total still binds."""
    token = "tok-sse"
    bearer = {"Authorization": f"Bearer {token}"}
    with (
        live_server(create_app(settings.model_copy(update={"api_token": token}))) as server,
        ExitStack() as stack,
    ):
        server.app.state.sse_slots = StreamSlots(per_client=1, total=3)
        client = server.client
        port = server.url.rsplit(":", 1)[1]
        proxied = {"X-Forwarded-For": "203.0.113.7"}  # every browser's request through one proxy

        def cookie(sid: str) -> dict[str, str]:
            return {"Cookie": f"lorastudio_session_{port}={sid}", **proxied}

        sids = []
        for _ in range(2):
            res = client.post("/api/session", headers=bearer)
            assert res.status_code == 200 and res.json()["cookie"] is True, res.text
            sids.append(res.headers["set-cookie"].split(";")[0].split("=", 1)[1])
            client.cookies.clear()

        def opened(headers: dict[str, str]) -> httpx.Response:
            client.headers.update(headers)
            try:
                return _open(stack, client, "/api/train/events")
            finally:
                for key in headers:
                    client.headers.pop(key, None)

        assert opened(cookie(sids[0])).status_code == 200
        again = opened(cookie(sids[0]))  # the same browser past its share: refused, as before
        assert again.status_code == 429 and "this browser session" in again.json()["detail"], again.text
        assert sids[0] not in again.text
        assert opened(cookie(sids[1])).status_code == 200  # another browser: its own share (was 429)
        assert opened({**bearer, **proxied}).status_code == 200  # a script: the address's share
        forged = opened({**bearer, **cookie("made-up-session-id")})
        assert forged.status_code == 429 and "SSE_MAX_PER_CLIENT" in forged.text, forged.text
        third = (
            client.post("/api/session", headers=bearer).headers["set-cookie"].split(";")[0].split("=", 1)[1]
        )
        client.cookies.clear()
        full = opened(cookie(third))  # a new session, but the server holds its total
        assert full.status_code == 503 and full.json()["limit"] == 3, full.text
    _LINES.clear()


def test_a_stream_with_no_event_for_the_idle_bound_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "SSE_IDLE_CHECK_S", 0.01)
    monkeypatch.setattr(sse, "SSE_IDLE_CLOSE_S", 0.05)
    log = EventLog(size=10)

    class Source:
        event_seq = property(lambda self: log.seq)

        def events_after(self, seq: int) -> list:
            return log.after(seq)

    async def main() -> list[str]:
        return [text async for text in sse._stream(_request(), Source(), 0)]

    texts = asyncio.run(asyncio.wait_for(main(), 5))
    assert texts[0] == ": connected\n\nid: 0\n\n" and "closed; reconnect with Last-Event-ID" in texts[-1]


def test_the_idle_close_names_the_streams_position_for_the_reconnect(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that never had an event (it started at "now") closed with a comment only: its
    client reconnected without Last-Event-ID and started at that later "now", losing the events of
    its reconnect delay (RELIABILITY 1880). Now the close carries `id:` (no data: a browser
    dispatches nothing, but takes it as its Last-Event-ID) naming where the stream was."""
    monkeypatch.setattr(sse, "SSE_IDLE_CHECK_S", 0.01)
    monkeypatch.setattr(sse, "SSE_IDLE_CLOSE_S", 0.05)
    log = EventLog(size=10)
    for n in range(2):
        log.append({"type": "status", "n": n})

    class Source:
        event_seq = property(lambda self: log.seq)

        def events_after(self, seq: int) -> list:
            return log.after(seq)

    async def main() -> list[str]:
        return [text async for text in sse._stream(_request(), Source(), log.seq)]

    last = asyncio.run(asyncio.wait_for(main(), 5))[-1]
    assert last.endswith("\nid: 2\n\n") and "data:" not in last, last
