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

A segment whose percent-escapes are not UTF-8 (`%FF`, the overlong `%C0%AE`, a Latin-1 client's
`caf%E9`) is answered 404 the same way: Starlette decodes the path with errors="replace", so each
such byte became U+FFFD and `POST /api/datasets/caf%E9/files` made a dataset named `caf\ufffd`,
which `DELETE /api/datasets/caf%E8` then deleted (every invalid byte is the same U+FFFD).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from lorastudio.api.hosts import send_json

_DOT_SEGMENTS = frozenset({".", ".."})


def traversal_segment(raw_path: str) -> str | None:
    """The first segment of the percent-encoded request path `raw_path` (no query string) that
    decodes to "." or ".." or holds "/" or "\\" (as sent, still encoded); None when there is none."""
    return next((segment for segment, _ in _bad_segments(raw_path)), None)


def _bad_segments(raw_path: str) -> Iterator[tuple[str, str]]:
    """Each segment of `raw_path` (as sent) that names no resource, with why: a separator or dot
    segment, or percent-escapes (or raw bytes, read as Latin-1) that are not UTF-8."""
    for segment in raw_path.split("/"):
        try:
            decoded = unquote(segment.encode("latin-1").decode("utf-8"), errors="strict")
        except UnicodeError:
            yield segment, "is not UTF-8 text (its bytes would be read as U+FFFD)"
            continue
        if decoded in _DOT_SEGMENTS or "/" in decoded or "\\" in decoded:
            yield segment, "names a separator or a dot segment"


class PathGuard:
    """ASGI middleware: answer 404 (see the module docstring) to an HTTP request whose path
    holds an encoded separator, a dot segment or a segment that is not UTF-8; pass everything
    else on unchanged."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")  # the path as sent (ASGI: bytes, without the query)
            # as sent, each byte one character (Latin-1); without raw_path the decoded path's bytes
            path = (raw.partition(b"?")[0] if raw else scope["path"].encode("utf-8", "replace")).decode(
                "latin-1"
            )
            bad = next(_bad_segments(path), None)
            if bad is not None:
                detail = f"no such path: its segment {bad[0]!r} {bad[1]}"
                await send_json(send, 404, "NotFound", detail)
                return
        await self.app(scope, receive, send)
