"""Encoded path traversal answered 404 before any route sees it (pure ASGI middleware).

A request path's segment that percent-decodes to a separator or a dot segment (`..%2f..`,
`%2e%2e`, `a%5cb`, or a literal `..` a client sent without normalising it) names no resource of
the studio: no route parameter (dataset, run, LoRA, file name) may hold `/`, `\\`, `.` or `..`
(data.paths.safe_component). Left to the router, such a path fell through to the web UI's static
mount, whose directory redirect answered `/api/runs/..%2f..` with a 307 to `/api/runs/../../`,
which a browser resolves to `/`; `/api/runs/..%2f..%2f` was the UI's index.html. `PathGuard`
answers every such request 404 in the error shape of api/errors.py, with no redirect, on every
route (API, gallery, static UI). Paths without one are untouched, the trailing-slash redirect
of the API routes (`/api/runs/` -> `/api/runs`) included.
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from lorastudio.api.hosts import send_json

_DOT_SEGMENTS = frozenset({".", ".."})


def traversal_segment(raw_path: str) -> str | None:
    """The first segment of the percent-encoded request path `raw_path` (no query string) that
    decodes to "." or ".." or holds "/" or "\\" (as sent, still encoded); None when there is none."""
    for segment in raw_path.split("/"):
        decoded = unquote(segment, errors="surrogateescape")
        if decoded in _DOT_SEGMENTS or "/" in decoded or "\\" in decoded:
            return segment
    return None


class PathGuard:
    """ASGI middleware: answer 404 (see the module docstring) to an HTTP request whose path
    holds an encoded separator or a dot segment; pass everything else on unchanged."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")  # the path as sent (ASGI: bytes, without the query)
            path = raw.partition(b"?")[0].decode("latin-1") if raw else scope["path"]
            segment = traversal_segment(path)
            if segment is not None:
                detail = f"no such path: its segment {segment!r} names a separator or a dot segment"
                await send_json(send, 404, "NotFound", detail)
                return
        await self.app(scope, receive, send)
