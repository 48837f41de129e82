"""How many event streams (GET /api/{train,models,captions}/events) the server holds at once.

Each live stream costs ~25 KB and a wake-up a second while idle, and opening hundreds at once
delayed every other answer by seconds (300 at once: 4.4 s on a loaded 2-core host, RELIABILITY
1770). So one client holds at most SSE_MAX_PER_CLIENT streams, refused past it with 429
`TooManyStreams`, and the server at most SSE_MAX_STREAMS in all, refused past it with 503
`TooManyStreams`; both name the limit and carry Retry-After. A browser tab holds one (the web
UI's training stream). The count is per app (each `create_app`), on its event loop's thread:
`acquire` and `release` are never called concurrently.

Who "one client" is (`client_of`): the browser session (api/sessions.py) whose cookie the stream
carries, when the studio has an API token and that cookie names a LIVE session of it; else the
client's address as uvicorn reports it (the X-Forwarded-For client of a proxy on 127.0.0.1, whose
header uvicorn trusts by default; the proxy's own address for a proxy elsewhere that
FORWARDED_ALLOW_IPS does not name). Behind a proxy every browser was the proxy's address, so 16
tabs of all its users together held the one share and the 17th was refused (RELIABILITY 2290);
with a token (fix 990 refuses a proxied request without one) each browser's session is counted
on its own. A session id cannot be forged (256 random bits, opened only with the token, at most
MAX_SESSIONS live), a dead or made-up cookie counts under the address, the forwarding headers'
values are never read here (a client could write any), and SSE_MAX_STREAMS bounds every key
together.
"""

from __future__ import annotations

import hashlib
from collections import Counter

from fastapi import Request
from fastapi.responses import JSONResponse

from lorastudio.api.sessions import session_ids

SSE_MAX_PER_CLIENT = 16  # live event streams one client address may hold
SSE_MAX_STREAMS = 64  # live event streams the server holds in all
SSE_RETRY_AFTER_S = 5  # Retry-After of a refused stream
SESSION_KEY = "session "  # a key of `client_of` for a browser session (never an address)


class StreamSlots:
    """The live streams of one app, by client (`client_of`: a browser session or an address)."""

    def __init__(self, per_client: int = SSE_MAX_PER_CLIENT, total: int = SSE_MAX_STREAMS) -> None:
        self.per_client = per_client
        self.total = total
        self.held: Counter[str] = Counter()

    def acquire(self, client: str) -> JSONResponse | None:
        """Take a slot for `client`; None when taken, else the refusal to answer (nothing taken)."""
        if self.held[client] >= self.per_client:
            who = "this browser session" if client.startswith(SESSION_KEY) else f"this client ({client})"
            return _refusal(
                429,
                f"{who} already holds {self.per_client} event streams, the most one "
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
    """The key a stream is counted under (module docstring): `SESSION_KEY` + a digest of the first
    live browser session the request's cookie names (the id itself is never a key, which the 429
    would name), when the studio has an API token; else the address uvicorn reports ("unknown"
    when the server does not say)."""
    state = request.app.state
    token = (state.settings.api_token or "").strip()
    store = getattr(state, "sessions", None)
    if token and store is not None:
        for sid in session_ids(request):
            if store.check(sid, token):
                return SESSION_KEY + hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return request.client.host if request.client else "unknown"
