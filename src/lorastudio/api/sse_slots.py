"""How many event streams (GET /api/{train,models,captions}/events) the server holds at once.

Each live stream costs ~25 KB and a wake-up a second while idle, and opening hundreds at once
delayed every other answer by seconds (300 at once: 4.4 s on a loaded 2-core host, RELIABILITY
1770). So one client (its address as uvicorn reports it: the X-Forwarded-For client of a proxy on
127.0.0.1, whose header uvicorn trusts by default; the proxy's own address for a proxy elsewhere
that FORWARDED_ALLOW_IPS does not name) holds at
most SSE_MAX_PER_CLIENT streams, refused past it with 429 `TooManyStreams`, and the server at most
SSE_MAX_STREAMS in all, refused past it with 503 `TooManyStreams`; both name the limit and carry
Retry-After. A browser tab holds one (the web UI's training stream). The count is per app (each
`create_app`), on its event loop's thread: `acquire` and `release` are never called concurrently.
"""

from __future__ import annotations

from collections import Counter

from fastapi import Request
from fastapi.responses import JSONResponse

SSE_MAX_PER_CLIENT = 16  # live event streams one client address may hold
SSE_MAX_STREAMS = 64  # live event streams the server holds in all
SSE_RETRY_AFTER_S = 5  # Retry-After of a refused stream


class StreamSlots:
    """The live streams of one app, by client address."""

    def __init__(self, per_client: int = SSE_MAX_PER_CLIENT, total: int = SSE_MAX_STREAMS) -> None:
        self.per_client = per_client
        self.total = total
        self.held: Counter[str] = Counter()

    def acquire(self, client: str) -> JSONResponse | None:
        """Take a slot for `client`; None when taken, else the refusal to answer (nothing taken)."""
        if self.held[client] >= self.per_client:
            return _refusal(
                429,
                f"this client ({client}) already holds {self.per_client} event streams, the most one "
                "client may (SSE_MAX_PER_CLIENT); close one, or send it again after Retry-After",
                self.per_client,
            )
        if sum(self.held.values()) >= self.total:
            return _refusal(
                503,
                f"the server already holds {self.total} event streams, the most it keeps at once "
                "(SSE_MAX_STREAMS); send it again after Retry-After",
                self.total,
            )
        self.held[client] += 1
        return None

    def release(self, client: str) -> None:
        """Give back one slot of `client` (one taken by `acquire`)."""
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]


def _refusal(status: int, detail: str, limit: int) -> JSONResponse:
    return JSONResponse(
        {"error": "TooManyStreams", "detail": detail, "limit": limit},
        status_code=status,
        headers={"Retry-After": str(SSE_RETRY_AFTER_S)},
    )


def slots_of(request: Request) -> StreamSlots:
    """The app's stream slots (made on first use)."""
    state = request.app.state
    slots = getattr(state, "sse_slots", None)
    if slots is None:
        slots = state.sse_slots = StreamSlots()
    return slots


def client_of(request: Request) -> str:
    """The address a stream is counted under ("unknown" when the server does not say)."""
    return request.client.host if request.client else "unknown"
