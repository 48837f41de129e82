"""Same-origin guard and log redaction for the server.

`SameOriginWrites` (pure ASGI middleware): a request that can change something (any method but
GET, HEAD, OPTIONS) and carries an `Origin` header must come from the server's own origin
(`<scheme>://<Host header>`); otherwise it is refused with 403 before any route runs. Browsers
send `Origin` on every cross-site POST/PUT/DELETE, including "simple" form posts (multipart
uploads) that CORS lets through without a preflight; clients that send no Origin (CLI, curl,
scripts) are unaffected. No CORS headers are ever sent, so other origins cannot read answers.

`RedactTokenFilter`: a logging filter that replaces the value of a `token=` query parameter in
log records (uvicorn's access log prints the full request path) with "***".
"""

from __future__ import annotations

import json
import logging
import re

from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_TOKEN_PARAM = re.compile(r"([?&]token=)[^&\s\"]*", re.IGNORECASE)


class SameOriginWrites:
    """Refuse (403) state-changing requests whose Origin is not this server's origin."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
        if origin is None or origin.rstrip("/").lower() == own.lower():
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": "CrossOriginRefused",
                "detail": f"cross-origin request refused: origin {origin!r} is not this server's origin",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def redact_tokens(text: str) -> str:
    """`text` with the value of every `token=` query parameter replaced by ***."""
    return _TOKEN_PARAM.sub(r"\1***", text)


class RedactTokenFilter(logging.Filter):
    """Redact `token=` query values in a record's message arguments (keeps every record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_tokens(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.msg, str):
            record.msg = redact_tokens(record.msg)
        return True


def install_log_redaction(logger_names: tuple[str, ...] = ("uvicorn.access", "uvicorn.error")) -> None:
    """Add one RedactTokenFilter to each named logger (idempotent)."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokenFilter) for f in logger.filters):
            logger.addFilter(RedactTokenFilter())
