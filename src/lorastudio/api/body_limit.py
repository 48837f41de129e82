"""The 413 of a request body over its route's cap, in the project's error shape.

The caps are FastAPI's `max_body_size`, given to every router by the app factory (api/app.py:
settings.max_json_mb; the dataset upload and the reference upload set their own). Starlette
answers a body over it with a plain-text "Content Too Large": sent at once for a declared
Content-Length over the cap, raised as an HTTPException of that text for a chunked body as it is
counted. `BodyLimitAnswer` (pure ASGI middleware) rewrites the first, api/errors.py the second,
both as `too_large`: {"error": "BodyTooLarge", "detail": naming the cap and its setting}. (An
app-wide cap would be sent from outside every middleware the app adds, so the caps are the
routers'.) The dataset upload's own cap answers UploadTooLarge as before.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOO_LARGE = "Content Too Large"  # Starlette's text for both


def too_large(scope: Scope, json_cap_mb: int) -> dict[str, Any]:
    """The error body of a request over its route's cap (the cap read from the scope while it
    applies, else the JSON bodies' one)."""
    limit = scope.get(MAX_BODY_SIZE_SCOPE_KEY)
    cap_mb = limit / 2**20 if isinstance(limit, int) else json_cap_mb
    setting = " (LORASTUDIO_MAX_JSON_MB)" if cap_mb == json_cap_mb else ""
    return {
        "error": "BodyTooLarge",
        "detail": f"request body larger than the {cap_mb:g} MB this route takes{setting}",
    }


class BodyLimitAnswer:
    """Rewrite Starlette's plain-text 413 as the JSON error body of `too_large`."""

    def __init__(self, app: ASGIApp, json_cap_mb: int):
        self.app = app
        self.json_cap_mb = json_cap_mb

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rewritten = False

        async def send_json(message: Message) -> None:
            nonlocal rewritten
            if message["type"] == "http.response.start" and message["status"] == 413 and _is_plain(message):
                rewritten = True
                body = json.dumps(too_large(scope, self.json_cap_mb)).encode()
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _REPLACED]
                headers += [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({**message, "headers": headers})
                await send({"type": "http.response.body", "body": body, "more_body": False})
            elif not rewritten:
                await send(message)

        await self.app(scope, receive, send_json)


_REPLACED = (b"content-type", b"content-length")


def _is_plain(message: Message) -> bool:
    return any(
        k.lower() == b"content-type" and v.startswith(b"text/plain") for k, v in message.get("headers", [])
    )
