"""api/sse.py: every stream of one event log shares one poller; each event is encoded once;
streams that start far back catch up from the log; the fan-out goes away with its last stream.

The endless streams are read from a real uvicorn (the `server` fixture), never through
starlette's TestClient: before starlette 1.9 it buffers a whole response, so a test reading an
endless stream through it never got an answer at the dependency floor (RELIABILITY 1281)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from live_server import LiveServer
from lorastudio.api import sse
from lorastudio.event_log import EventLog
from sse_messages import SseReader, sse_events, sse_text_events


class CountingSource:
    """A real EventLog seen through the SSE source protocol, counting reads and encodings."""

    def __init__(self) -> None:
        self.log = EventLog(size=10_000)
        self.reads = 0

    @property
    def event_seq(self) -> int:
        return self.log.seq

    def events_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        self.reads += 1
        return self.log.after(seq)


def _request() -> Request:
    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never disconnects on its own
        return {"type": "http.disconnect"}

    return Request({"type": "http", "method": "GET", "path": "/", "headers": []}, receive)


async def _collect(source: CountingSource, start: int, until: int) -> list[int]:
    """Ids of the events one stream delivers, from `start` until it has seen id `until`."""
    ids: list[int] = []
    reader = SseReader()
    stream = sse._stream(_request(), source, start)
    try:
        async for text in stream:
            for event in sse_text_events(text, reader):
                ids.append(int(event.id))
                assert json.loads(event.data)["n"] == ids[-1]
            if ids and ids[-1] >= until:
                return ids
    finally:
        await stream.aclose()
    return ids


def test_many_streams_share_one_poller_and_one_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[int] = []
    real_encode = sse.encode_event
    monkeypatch.setattr(sse, "encode_event", lambda seq, ev: (encoded.append(seq), real_encode(seq, ev))[1])
    source = CountingSource()
    streams, events = 50, 40

    async def main() -> list[list[int]]:
        tasks = [asyncio.create_task(_collect(source, 0, events)) for _ in range(streams)]
        await asyncio.sleep(0.05)  # every stream connected and waiting
        for n in range(1, events + 1):
            source.log.append({"type": "status", "n": n})
            await asyncio.sleep(0.01)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
        await asyncio.sleep(0)  # let the cancelled poller finish
        return results

    results = asyncio.run(main())
    assert all(ids == list(range(1, events + 1)) for ids in results)
    assert sorted(encoded) == list(range(1, events + 1))  # each event encoded once, not per stream
    # ~0.5 s of events at one read per poll interval, plus a first read; not one read per stream
    assert source.reads < 0.5 / sse.SSE_POLL_S + 10, source.reads
    assert source not in sse._FANOUTS or not sse._FANOUTS[source]  # gone with its last stream


def test_a_stream_far_behind_catches_up_from_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "FANOUT_BUFFER", 5)
    source = CountingSource()
    for n in range(1, 31):
        source.log.append({"type": "status", "n": n})

    async def main() -> tuple[list[int], list[int]]:
        live = asyncio.create_task(_collect(source, 30, 60))  # starts the fan-out at id 30
        await asyncio.sleep(0.05)
        for n in range(31, 61):
            source.log.append({"type": "status", "n": n})
            await asyncio.sleep(0.005)
        await asyncio.sleep(3 * sse.SSE_POLL_S)  # the shared buffer now starts well after id 3
        late = await asyncio.wait_for(_collect(source, 2, 60), 10)
        return await asyncio.wait_for(live, 10), late

    live, late = asyncio.run(main())
    assert live == list(range(31, 61))
    assert late == list(range(3, 61))


@pytest.mark.timeout(60)  # before: the stream stayed silent for ever
def test_an_id_of_another_server_life_replays_this_lifes_events(server: LiveServer) -> None:
    """A browser's EventSource reconnects to a restarted server with the Last-Event-ID it had
    (ids restart at 1): the stream sent nothing until this server's ids passed it. Now an id past
    the log's newest starts at its beginning; a current one resumes after it."""
    service, client = server.app.state.service, server.client
    for n in range(1, 4):
        service.event_log.append({"type": "status", "n": n})
    for headers, params in (
        ({"last-event-id": "537"}, {}),
        ({}, {"after": 9999}),
        ({"last-event-id": "1"}, {}),
    ):
        with client.stream("GET", "/api/train/events", headers=headers, params=params) as resp:
            ids = []
            for event in sse_events(resp.iter_lines()):
                ids.append(int(event.id))
                if ids[-1] == 3:
                    break
        assert ids == ([2, 3] if headers.get("last-event-id") == "1" else [1, 2, 3]), (headers, params, ids)


@pytest.mark.timeout(60)
def test_a_reconnects_last_event_id_wins_over_the_urls_after(server: LiveServer) -> None:
    """An EventSource opened with `?after=0` reconnects (a proxy's cut, the idle close) with
    the same URL and Last-Event-ID: `after` won, and every event since 0 came again (RELIABILITY
    1880). Now the reconnect resumes after its Last-Event-ID."""
    service, client = server.app.state.service, server.client
    for n in range(1, 4):
        service.event_log.append({"type": "status", "n": n})
    headers = {"last-event-id": "2"}
    with client.stream("GET", "/api/train/events", headers=headers, params={"after": 0}) as resp:
        first = next(sse_events(resp.iter_lines()))
    assert first.id == "3"


@pytest.mark.timeout(60)
def test_a_resume_past_what_the_log_keeps_says_so_before_the_rest(server: LiveServer) -> None:
    """A client resuming from an id whose next events the log dropped got the oldest kept ones
    as if they followed on (RELIABILITY 536): now an `event: gap` naming both ids comes first."""
    service, client = server.app.state.service, server.client
    kept = service.event_log._events.maxlen
    for n in range(1, kept + 11):  # ids 1-10 dropped
        service.event_log.append({"type": "status", "n": n})
    for headers, params, after in (({"last-event-id": "4"}, {}, 4), ({}, {"after": 0}, 0)):
        with client.stream("GET", "/api/train/events", headers=headers, params=params) as resp:
            events = []
            for event in sse_events(resp.iter_lines()):
                events.append(event)
                if event.type != "gap":
                    break
        gap, first = events
        assert gap.type == "gap" and gap.id == str(after)  # no id of its own: the client's stays
        assert json.loads(gap.data) == {"type": "gap", "after": after, "next": 11}
        assert first.id == "11"
    with client.stream("GET", "/api/train/events", params={"after": 10}) as resp:  # nothing lost
        first = next(sse_events(resp.iter_lines()))
    assert first.type == "status" and first.id == "11"


def test_a_stream_behind_writes_bounded_pieces() -> None:
    """A stream 3,000 events of 2 KB behind wrote them as one 6 MB string, held whole for a
    client that does not read (RELIABILITY 537): now pieces of about SSE_CHUNK_BYTES, every
    event once, in order."""
    source = CountingSource()
    for n in range(1, 3001):
        source.log.append({"type": "status", "n": n, "pad": "x" * 2000})

    async def main() -> tuple[list[int], list[int]]:
        sizes: list[int] = []
        ids: list[int] = []
        stream = sse._stream(_request(), source, 0)
        try:
            async for text in stream:
                sizes.append(len(text))
                ids += [int(event.id) for event in sse_text_events(text)]
                if ids and ids[-1] == 3000:
                    break
        finally:
            await stream.aclose()
        return sizes, ids

    sizes, ids = asyncio.run(main())
    assert ids == list(range(1, 3001))
    assert max(sizes) < getattr(sse, "SSE_CHUNK_BYTES", 64 * 1024) + 2200, max(sizes)


def test_a_stream_gives_the_loop_a_turn_between_pieces() -> None:
    """A write into a connection that is not paused suspends nothing: a stream catching up wrote
    piece after piece without the event loop running, so a client gone meanwhile was learnt of
    only after the whole backlog went into the closed socket (asyncio logged "socket.send()
    raised exception." ~40 times per such tab, RELIABILITY 1881). Now other tasks run between
    two pieces, from the log and from the shared buffer alike."""
    source = CountingSource()

    def append(count: int) -> None:
        for _ in range(count):
            source.log.append({"type": "status", "n": source.log.seq + 1, "pad": "x" * 2000})

    append(200)

    async def main(start: int) -> list[int]:
        turns = 0

        async def ticker() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        seen: list[int] = []
        stream = sse._stream(_request(), source, start)
        try:
            async for text in stream:
                if text.startswith(": connected"):
                    append(200 if start else 0)  # start 200: these come through the shared buffer
                    continue
                seen.append(turns)
                if f"id: {start + 200}\n" in text:
                    break
        finally:
            await stream.aclose()
            task.cancel()
        return seen

    for start in (0, 200):  # the log's 200 events (before the fan-out began), then 200 more
        seen = asyncio.run(main(start))
        assert len(seen) > 3 and all(b > a for a, b in zip(seen, seen[1:], strict=False)), (start, seen)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["/api/train/events", "/api/captions/events", "/api/models/events"])
def test_a_last_event_id_of_5000_digits_is_an_id_of_another_life(server: LiveServer, path: str) -> None:
    """int() of it raised (Python's 4,300-digit limit): a 500 on every stream (RELIABILITY 540).
    Now it is past any id of this life: the stream replays the log from its start."""
    client = server.client
    server.app.state.service.event_log.append({"type": "status", "n": 1})
    with client.stream("GET", path, headers={"last-event-id": "9" * 5000}) as resp:
        assert resp.status_code == 200
        assert next(resp.iter_lines()) == ": connected"
    if path == "/api/train/events":
        with client.stream("GET", path, headers={"last-event-id": "9" * 5000}) as resp:
            assert next(sse_events(resp.iter_lines())).id == "1"


@pytest.mark.timeout(60)
def test_a_stream_cut_before_its_first_event_resumes_where_it_began(server: LiveServer) -> None:
    """A stream cut before it sent an event (a network blip, a proxy restart) left its browser
    without a Last-Event-ID: the reconnect started at the server's "now", and the events of the
    reconnect delay were lost (RELIABILITY 2050). Now every stream names its position at once (an
    `id:` without data: no event), so the reconnect with that Last-Event-ID gets each of them once.
    On the old code no `id:` comes before an event: the first read times out."""
    state, client = server.app.state, server.client
    logs = {  # each stream's source (the captions' and fetches' are made by their first request)
        "/api/train/events": lambda: state.service.event_log,
        "/api/captions/events": lambda: state.captions._log,
        "/api/models/events": lambda: state.fetches._log,
    }
    for path, log_of in logs.items():
        reader = SseReader()
        with client.stream("GET", path, timeout=httpx.Timeout(30, read=5)) as resp:
            for line in resp.iter_lines():
                assert reader.feed(line) is None  # the position is no event
                if reader.last_id:
                    break  # the cut
        log = log_of()
        start = log.seq
        assert reader.last_id == str(start), (path, reader.last_id, start)
        for n in range(3):  # the events of the reconnect delay
            log.append({"type": "status", "n": n})
        with client.stream("GET", path, headers={"last-event-id": reader.last_id}) as resp:
            ids = []
            for event in sse_events(resp.iter_lines(), reader):
                ids.append(int(event.id))
                if ids[-1] >= start + 3:
                    break
        assert ids == [start + 1, start + 2, start + 3], (path, ids)
