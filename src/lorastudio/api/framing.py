"""Requests whose body framing is ambiguous (request smuggling), refused before any route.

A request that sends both `Transfer-Encoding` and `Content-Length` is read by h11 (uvicorn's
parser) as chunked, as RFC 9112 section 6.3 says, and the connection was kept open: the bytes
after the chunked body's end (`0\\r\\n\\r\\n`) were answered as a second request. A proxy in
front that frames by Content-Length (the setups LORASTUDIO_ALLOWED_ORIGINS and the root path
serve) forwards those bytes as the first request's body, so a request it never saw, and whose
headers it never checked, reached the studio: request smuggling. RFC 9112 lets a server refuse
such a request and requires it to close the connection after answering; `AmbiguousFraming`
does both (400 in the JSON error shape, `Connection: close`, which uvicorn honours by closing
once the answer is sent), so nothing pipelined behind it is read as a request. It is the
outermost middleware: an answer given before it (the Host guard's 421, as it was placed inside
that guard) kept the connection open, and the bytes after the chunked end were answered as a
second request, whose Host the guard accepted (RELIABILITY 1883). Its answer carries the
headers the Host guard adds to every other (api/hosts.SECURITY_HEADERS).
Two Content-Length values or a Transfer-Encoding other than chunked are h11's own 400.

Hand-written: neither uvicorn nor Starlette has an option for it (h11 keeps CL + TE by design).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from lorastudio.api.hosts import SECURITY_HEADERS, send_json

CLOSE = ((b"connection", b"close"),)


class AmbiguousFraming:
    """ASGI middleware: a request with both Transfer-Encoding and Content-Length is answered 400
    and its connection closed (module docstring); others pass unchanged."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {k.lower() for k, _ in scope["headers"]}
            if b"transfer-encoding" in names and b"content-length" in names:
                detail = (
                    "request refused: it sends both Transfer-Encoding and Content-Length, whose"
                    " bodies may differ (RFC 9112 section 6.3); send one of them"
                )
                await send_json(send, 400, "AmbiguousFraming", detail, (*CLOSE, *SECURITY_HEADERS))
                return
        await self.app(scope, receive, send)
