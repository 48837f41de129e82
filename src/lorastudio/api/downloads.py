"""File downloads and HEAD requests, as HTTP (RFC 9110) asks of every route.

- `Download`: the FileResponse of every route that serves a file (a LoRA, a gallery image, a
  run's sample, a reference image). A Range header it cannot parse (another unit, a start after
  its end, no range at all, a number of 5000 digits) is ignored and the whole file is sent (200),
  as RFC 9110 section 14.2 says; Starlette answered 400 in plain text. A range past the end is
  still 416 with `Content-Range: bytes */<size>`, a good one 206.
- `HeadAsGet` (pure ASGI middleware): a HEAD request is answered as its GET is, without a body
  (same status and headers, Content-Length included). FastAPI routes take only the methods
  they declare, so `HEAD /api/loras/x/file` (`curl -I`, a download manager sizing a file) was
  404 from the static UI behind them. A Download reads no file for a HEAD (Starlette's own
  header-only path); a JSON route's body is computed and dropped; an event stream ends at once.
  The file is opened once, before the headers: one removed between the route's check and the
  answer is a 404 (NotFound), not Starlette's RuntimeError (a 500), and one removed or replaced
  once the headers are sent is still sent whole (Starlette opened it again after them: the
  answer was cut after its 200).
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, BinaryIO

import anyio
from fastapi.responses import FileResponse
from starlette.responses import MalformedRangeHeader
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lorastudio.errors import NotFound

HEAD_KEY = "lorastudio.head"  # set in a HEAD request's scope, whose method HeadAsGet made GET


class Download(FileResponse):
    """A FileResponse that ignores a Range header it cannot parse (the whole file, 200) and
    answers a HEAD request (HeadAsGet) with the headers alone, reading no file."""

    @classmethod
    def _parse_range_header(cls, http_range: str, file_size: int) -> list[tuple[int, int]]:
        try:
            return super()._parse_range_header(http_range, file_size)
        except MalformedRangeHeader:
            return []  # no range: the whole representation

    _held: Any = None  # the file opened for this answer (__call__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get(HEAD_KEY):
            scope = {**scope, "method": "HEAD"}
        held = await anyio.to_thread.run_sync(_open_regular, str(self.path))
        if held is None:  # deleted (or replaced by something else) since the route's check
            raise NotFound(f"no file {os.path.basename(self.path)!r}: it was removed")
        try:
            st = os.fstat(held.fileno())
            self.set_stat_headers(st)
            self.stat_result = st
            self._held = anyio.wrap_file(held)
            await super().__call__(scope, receive, send)
        finally:
            held.close()

    @asynccontextmanager
    async def _open_file(self) -> AsyncIterator[Any]:
        """The file opened when the answer began (its headers are of that file): a file deleted
        or replaced after them is still sent whole, never cut after a 200."""
        await self._held.seek(0)
        yield self._held


def _open_regular(path: str) -> BinaryIO | None:
    """`path` opened for reading (a FIFO never waited on), or None when it is gone or not a
    regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        return None
    return fh


class HeadAsGet:
    """Route a HEAD request as a GET and send its answer without a body."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        done = False

        async def headers_only(message: Message) -> None:
            nonlocal done
            if message["type"] == "http.response.start":
                await send(message)
            elif message["type"] == "http.response.body" and not done:
                done = True  # later chunks (a stream's) are dropped; the client sees the end now
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        get: dict[str, Any] = {**scope, "method": "GET", HEAD_KEY: True}
        await self.app(get, receive, headers_only)
