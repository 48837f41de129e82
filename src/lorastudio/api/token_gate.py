"""A write without the API token answered 401 before its body is read (pure ASGI middleware).

FastAPI reads and parses a route's JSON body (up to settings.max_json_mb) before it runs the
route's dependencies, `require_token` (api/deps.py) among them, and both the read and the parse
run on the server's event loop. With a token set (remote access), a client WITHOUT the token
could so make the server take in and parse a 4 MB JSON body per request before its 401: on a
loaded 2-core host each such request held every other client's answer 0.3-1.5 s (session 37
attack audit, RELIABILITY 1580). `TokenGate` asks `require_token`'s own question
(`deps.token_refusal`) of every request of a method that carries a body (all but GET, HEAD and
OPTIONS), from its headers alone: such a request's only credential is the bearer header (the
`?token=` query and the session cookie stand only on GETs). A refused one is answered with the
same 401 (detail and WWW-Authenticate header) in the error shape of api/errors.py, its body
never read, and the connection closed (an unread body cannot be skipped to a next request).
GETs and HEADs carry no body and go on to `require_token` as before; OPTIONS has no route.

The app adds it inside every other guard (api/app.py), so a forged Host (421), a cross-origin
write (403) and an encoded dot segment (404) are answered as before, whatever the token.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from lorastudio.api.deps import token_refusal
from lorastudio.api.errors import status_error_name
from lorastudio.api.hosts import send_json

BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})


class TokenGate:
    """ASGI middleware: with settings.api_token set (read from the app's state on each request,
    so a changed token applies at once), answer `token_refusal`'s 401 to a request of a method
    that carries a body before anything reads the body; pass every other request on unchanged."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in BODYLESS and "app" in scope:
            refusal = token_refusal(Request(scope))  # headers, query and cookies only
            if refusal is not None:
                headers = [
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in (refusal.headers or {}).items()
                ]
                headers.append((b"connection", b"close"))
                await send_json(
                    send,
                    refusal.status_code,
                    status_error_name(refusal.status_code),
                    refusal.detail,
                    tuple(headers),
                )
                return
        await self.app(scope, receive, send)
