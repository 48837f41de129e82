"""Server-sent events over an in-memory event log (the job service's, the model fetcher's).

A source is anything with `event_seq` (the sequence number of its newest event) and
`events_after(seq) -> [(seq, event_dict)]`. The stream sends `id: <seq>`, `event: <type>`,
`data: <strict JSON>` per event, a comment as keep-alive when idle, and ends when the client goes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import StreamingResponse

SSE_POLL_S = 0.25
SSE_KEEPALIVE_S = 15.0


class EventLog(Protocol):
    @property
    def event_seq(self) -> int: ...

    def events_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]: ...


def event_stream(
    request: Request, log: EventLog, after: int | None, last_event_id: str | None
) -> StreamingResponse:
    """The SSE response for `log`, starting after event `after` (or the Last-Event-ID header);
    with neither, only events newer than now are sent."""
    start_at = after
    if start_at is None and last_event_id and last_event_id.isdigit():
        start_at = int(last_event_id)
    if start_at is None:
        start_at = log.event_seq
    return StreamingResponse(
        _stream(request, log, start_at),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(request: Request, log: EventLog, seq: int) -> AsyncIterator[str]:
    yield ": connected\n\n"
    idle = 0.0
    while not await request.is_disconnected():
        batch = log.events_after(seq)
        for seq, event in batch:
            yield f"id: {seq}\nevent: {event['type']}\ndata: {json.dumps(event, allow_nan=False)}\n\n"
        if batch:
            idle = 0.0
            continue
        await asyncio.sleep(SSE_POLL_S)
        idle += SSE_POLL_S
        if idle >= SSE_KEEPALIVE_S:
            idle = 0.0
            yield ": keep-alive\n\n"
