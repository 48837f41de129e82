"""Server-sent events over an in-memory event log (the job service's, the model fetcher's).

A source is anything with `event_seq` (the sequence number of its newest event) and
`events_after(seq) -> [(seq, event_dict)]`. The stream opens with a `: connected` comment and an
`id: <start>` line without data (the HTML spec's EventSource takes it as its Last-Event-ID and
dispatches no event: a client reading `id:` lines as events must skip a message without `data:`),
then sends `id: <seq>`, `event: <type>`, `data: <strict JSON>` per event, a comment as keep-alive
when idle, and ends when the client goes. A stream cut before its first event so resumes where it
began (RELIABILITY 2050).

All streams of one source (per event loop) share one `_Fanout`: a single poller task reads the
log, encodes each event once and wakes the waiting streams through an asyncio.Condition, so the
cost of a new event does not grow with a poll and an encoding per client. A stream that starts
further back than the fan-out's buffer first catches up from the log itself.

A stream that resumes (`after`, Last-Event-ID) from an id whose next events the log no longer
keeps (it keeps the newest few thousand) first sends `event: gap` with `data: {"type": "gap",
"after": <the id asked>, "next": <the first id sent>}` and no id: the events between were lost
to this client, which should read a snapshot (GET /api/train/status) before applying the rest.
Before, the stream went on from the oldest kept event as if nothing were missing.

A stream writes at most SSE_CHUNK_BYTES at a time (or one event, if larger), and the server
writes the next piece only once the client has read enough of the last (uvicorn's flow control):
a client that reads slowly, or not at all, holds about that much of the server's memory. Before,
a stream behind wrote everything it lacked at once (up to the whole log: ~20 MB per stalled
client of 2 KB events, measured).

How many streams are live at once is capped (api/sse_slots.py: per client address and in all,
refused 429 / 503 `TooManyStreams` naming the limit), and a stream that sent no event for
SSE_IDLE_CLOSE_S ends (a comment says why, and an `id:` line without data naming the stream's
position, which sets the client's Last-Event-ID even where no event came): a browser's
EventSource reconnects by itself with Last-Event-ID (nothing lost), a script that forgot its
stream gives its slot back (RELIABILITY 1770, 1880). A reconnect's Last-Event-ID wins over the
URL's `after`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import sys
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from lorastudio.api.sse_slots import client_of, slots_of

SSE_POLL_S = 0.25  # how often the one poller of a source looks for new events (batches writes)
SSE_KEEPALIVE_S = 15.0
SSE_IDLE_CHECK_S = 1.0  # an idle stream checks this often whether its client is gone
FANOUT_BUFFER = 1000  # encoded events kept for streams that lag behind (older: read from the log)
SSE_CHUNK_BYTES = 64 * 1024  # the most text one write of a stream holds (past one event's own size)
SSE_IDLE_CLOSE_S = 600.0  # a stream that sent no event this long ends (the client reconnects)

log_ = logging.getLogger("lorastudio.api")


class EventLog(Protocol):
    @property
    def event_seq(self) -> int: ...

    def events_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]: ...


def encode_gap(after: int, next_id: int) -> str:
    """The message of a gap: the events after `after` and before `next_id` are gone (no `id:`,
    so a client's Last-Event-ID stays the last event it had)."""
    return f"event: gap\ndata: {json.dumps({'type': 'gap', 'after': after, 'next': next_id})}\n\n"


def encode_event(seq: int, event: dict[str, Any]) -> str:
    """One SSE message. Raises ValueError for a non-finite number (events are sanitised)."""
    return f"id: {seq}\nevent: {event['type']}\ndata: {json.dumps(event, allow_nan=False)}\n\n"


class _Fanout:
    """The shared reader of one event log on one event loop; lives while it has subscribers."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.loop = asyncio.get_running_loop()
        self.cond = asyncio.Condition()
        self.seq = log.event_seq  # newest event published to the buffer
        self._ids: list[int] = []  # ids of the buffered events, ascending
        self._texts: list[str] = []  # their encoded messages
        self.subscribers = 0
        self._task: asyncio.Task[None] | None = None

    def subscribe(self) -> None:
        self.subscribers += 1
        if self._task is None:
            self._task = self.loop.create_task(self._poll(), name="lorastudio-sse-fanout")

    def unsubscribe(self) -> bool:
        """Drop one subscriber; returns True when it was the last (the poller is cancelled)."""
        self.subscribers -= 1
        if self.subscribers > 0:
            return False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        return True

    def texts_after(self, seq: int) -> list[tuple[int, str]] | None:
        """Encoded events with id > seq up to `self.seq`; None when some of them are older than
        the buffer (the caller reads those from the log)."""
        if seq >= self.seq:
            return []
        start = bisect.bisect_right(self._ids, seq)
        if start == 0 and (not self._ids or self._ids[0] > seq + 1):
            return None
        return list(zip(self._ids[start:], self._texts[start:], strict=True))

    async def _poll(self) -> None:
        while True:
            batch = self.log.events_after(self.seq)
            if batch:
                async with self.cond:
                    for seq, event in batch:
                        try:
                            text = encode_event(seq, event)
                        except (ValueError, TypeError) as err:  # events are sanitised upstream
                            log_.warning("event %d is not strict JSON, not streamed: %s", seq, err)
                            text = ""
                        self._ids.append(seq)
                        self._texts.append(text)
                    if len(self._ids) > 2 * FANOUT_BUFFER:
                        del self._ids[:-FANOUT_BUFFER], self._texts[:-FANOUT_BUFFER]
                    self.seq = batch[-1][0]
                    self.cond.notify_all()
            await asyncio.sleep(SSE_POLL_S)


# source -> event loop -> its fan-out (tests and servers may run several loops)
_FANOUTS: weakref.WeakKeyDictionary[Any, dict[asyncio.AbstractEventLoop, _Fanout]] = (
    weakref.WeakKeyDictionary()
)


def _fanout_for(log: EventLog) -> _Fanout:
    per_loop = _FANOUTS.setdefault(log, {})
    loop = asyncio.get_running_loop()
    if loop not in per_loop:
        per_loop[loop] = _Fanout(log)
    return per_loop[loop]


def _release(log: EventLog, fanout: _Fanout) -> None:
    if fanout.unsubscribe():
        per_loop = _FANOUTS.get(log, {})
        if per_loop.get(fanout.loop) is fanout:
            del per_loop[fanout.loop]


class _SlotStream(StreamingResponse):
    """A stream response that gives its slot back when it ends, however it ends."""

    def __init__(self, content: AsyncIterator[str], release: Any) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._release_slot = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release_slot()


def event_stream(request: Request, log: EventLog, after: int | None, last_event_id: str | None) -> Response:
    """The SSE response for `log`, starting after the Last-Event-ID header's event (a reconnect),
    else after event `after`; with neither, only events newer than now are sent. An id past the
    log's newest is one of another server's life (ids restart at 1 when the server starts; a browser's EventSource
    reconnects to the new server with the old Last-Event-ID): every event of this life is new to
    that client, so the stream starts at the log's beginning (it waited, silent, until this
    server's ids caught up). Past the stream caps: the 429 / 503 of api/sse_slots.py."""
    slots, client = slots_of(request), client_of(request)
    refused = slots.acquire(client)
    if refused is not None:
        return refused
    # a reconnect's Last-Event-ID (the browser's position) wins over the URL's `after` (where the
    # stream first started): an EventSource opened with ?after=N reconnects with both, and
    # `after` replayed every event since N again at each reconnect (RELIABILITY 1880)
    start_at = _event_id(last_event_id) if last_event_id else None
    if start_at is None:
        start_at = after
    if start_at is None:
        start_at = log.event_seq
    elif start_at > log.event_seq:
        start_at = 0
    return _SlotStream(_stream(request, log, start_at), lambda: slots.release(client))


def _pieces(messages: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Consecutive `(id, message)`s joined into pieces of about SSE_CHUNK_BYTES (a message is
    never split): `(id of the piece's last message, text)` each."""
    parts: list[str] = []
    size = 0
    last = 0
    for seq, text in messages:
        parts.append(text)
        size += len(text)
        last = seq
        if size >= SSE_CHUNK_BYTES:
            yield last, "".join(parts)
            parts, size = [], 0
    if parts:
        yield last, "".join(parts)


def _event_id(text: str) -> int | None:
    """The event id a Last-Event-ID header names (None: not an id, ASCII digits only). One of
    more digits than any id reaches is read as past the log's newest (another server life):
    int() of it raised past 4,300 digits, a 500 for the stream."""
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= _ID_DIGITS else sys.maxsize


_ID_DIGITS = 18  # an event id never reaches 10**18


async def _stream(request: Request, log: EventLog, seq: int) -> AsyncIterator[str]:
    """The messages of one stream from after event `seq`. Each piece is followed by a turn of
    the event loop: a write into a connection that is not paused suspends nothing, so a stream
    catching up on a client that had gone wrote its whole backlog into the closed socket before
    the loop could tell it of the loss (asyncio logging "socket.send() raised exception." up to
    once a piece, ~40 lines per tab closed while it caught up, RELIABILITY 1881)."""
    fanout = _fanout_for(log)
    fanout.subscribe()
    try:
        # `id:` without data right away: the client's Last-Event-ID is this stream's position
        # from the start (a browser dispatches no event for it), so a stream cut before its first
        # event resumes here, not at the server's "now" after the reconnect delay (RELIABILITY 2050)
        yield f": connected\n\nid: {seq}\n\n"
        idle = quiet = 0.0
        while True:
            texts = fanout.texts_after(seq)
            if texts is None:  # further back than the shared buffer: catch up from the log
                batch = log.events_after(seq)
                if batch:
                    if batch[0][0] > seq + 1:
                        yield encode_gap(seq, batch[0][0])
                    for last, text in _pieces((s, encode_event(s, e)) for s, e in batch):
                        yield text
                        seq = last
                        await asyncio.sleep(0)  # the loop's turn between pieces (_stream's docstring)
                else:  # the log itself has dropped them: continue from the shared buffer
                    if fanout.seq > seq:
                        yield encode_gap(seq, fanout.seq + 1)
                    seq = max(seq, fanout.seq)
                continue
            if texts:
                for last, text in _pieces(texts):
                    yield text
                    seq, idle, quiet = last, 0.0, 0.0
                    await asyncio.sleep(0)
                continue
            woke = False
            # asyncio.timeout, not wait_for: wait_for ran the wait in a task of its own, and when
            # the client went (the response's cancel scope cancels this task again and again) it
            # returned before that task had taken the lock back: "Lock is not acquired" and a
            # traceback in the log for every abandoned stream.
            async with fanout.cond:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(SSE_IDLE_CHECK_S):
                        woke = await fanout.cond.wait_for(lambda last=seq: fanout.seq > last)
            if woke:
                continue
            if await request.is_disconnected():
                return
            idle += SSE_IDLE_CHECK_S
            quiet += SSE_IDLE_CHECK_S
            if quiet >= SSE_IDLE_CLOSE_S:
                # `id:` without data: the client's Last-Event-ID becomes this stream's position
                # (a browser dispatches no event for it), so a stream that never had an event
                # resumes here too, not at "now" after its reconnect delay (RELIABILITY 1880)
                yield (
                    f": no event for {SSE_IDLE_CLOSE_S:.0f} s, closed; reconnect with Last-Event-ID\n"
                    f"id: {seq}\n\n"
                )
                return
            if idle >= SSE_KEEPALIVE_S:
                idle = 0.0
                yield ": keep-alive\n\n"
    finally:
        _release(log, fanout)
