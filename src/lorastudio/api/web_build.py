"""The web UI's build id: said on every /api answer, and a stale page's settings refused.

A browser tab keeps the bundle it loaded. After an upgrade (or a roll back) its forms know other
settings than the server's: a Train form older than a setting leaves it out, and "Train again"
(which fills the form from the run's config, skipping keys it does not know) started the copy
without it, with nothing said (RELIABILITY 2061; the `validation_seed` case of session 38).

`scripts/build_web.sh` (vite.config.ts) stamps each build with an id, written into the bundle and
into `web_dist/build-id.txt`. `WebBuildStamp` then:

- adds `X-Lorastudio-Build: <id of the served bundle>` to every answer under /api of a request
  that passed the route's token check (`deps.require_token`, which passes every request when no
  token is set), and never to a 401: a
  client without the token learns nothing of the install (the 404 of an unknown /api path and
  the 405 of a GET of a write route, answered before any route's token check, named the
  build: RELIABILITY 2231), so a page whose own id differs learns
  it from its next request and asks to be reloaded (web/src/api/build.ts);
- answers 409 `PageOutdated` to a request that starts something with settings (`SETTINGS_WRITES`:
  a run's start, a resume, a generation) sent by a page of another build (its own id in the same
  header) before the body is read: nothing starts with settings the page could not show. A
  request without the header (the CLI, curl, a script, a bundle older than this) goes on as
  before, and so does every request while no bundle is served or the served one has no id.

The id is read again when `build-id.txt` changes (a rebuild under a running server serves the
new bundle at once).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lorastudio.api.deps import TOKEN_PASSED
from lorastudio.api.hosts import send_json
from lorastudio.api.proxy import route_path

log = logging.getLogger(__name__)

BUILD_FILE = "build-id.txt"  # in web_dist, written by the Vite build (web/vite.config.ts)
HEADER = "x-lorastudio-build"  # the served bundle's id on answers; the page's own on requests
BUILD_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
# (method, path pattern) of the requests that start something with settings a page sends
SETTINGS_WRITES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("POST", re.compile(r"/api/train/start")),
    ("POST", re.compile(r"/api/runs/[^/]+/resume")),
    ("POST", re.compile(r"/api/generate")),
    ("POST", re.compile(r"/api/generations")),
)
OUTDATED = (
    "This page is of another version of the studio than the one running now (updated or rolled "
    "back since the page was loaded): its form may lack settings this version has, which would be "
    "left out. Reload the page and send it again; nothing was started."
)


class ServedBuild:
    """The id of the bundle in `web_dist` (None: no UI, or a build without an id), read again
    when its file changes."""

    def __init__(self, web_dist: Path):
        self.path = web_dist / BUILD_FILE
        self._seen: tuple[int, int] | None = None
        self._id: str | None = None

    def current(self) -> str | None:
        """The served bundle's id now; a file that is not an id is logged once and taken as none."""
        try:
            st = self.path.stat()
        except OSError:
            self._seen, self._id = None, None
            return None
        key = (st.st_mtime_ns, st.st_size)
        if key != self._seen:
            self._seen = key
            try:
                text = self.path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as err:
                log.warning(
                    "web UI build id %s unreadable (%s): pages are not told of updates", self.path, err
                )
                text = ""
            if text and not BUILD_ID.fullmatch(text):
                log.warning(
                    "web UI build id %s is not an id (%r): pages are not told of updates",
                    self.path,
                    text[:40],
                )
                text = ""
            self._id = text or None
        return self._id


def _header(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == HEADER.encode():
            return value.decode("latin-1").strip()
    return None


def starts_with_settings(method: str, path: str) -> bool:
    """Whether `method path` is one of SETTINGS_WRITES."""
    return any(method == m and pattern.fullmatch(path) for m, pattern in SETTINGS_WRITES)


class WebBuildStamp:
    """ASGI middleware: the served bundle's id on /api answers, a stale page's settings writes
    refused (module docstring)."""

    def __init__(self, app: ASGIApp, web_dist: Path):
        self.app = app
        self.build = ServedBuild(web_dist)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope) if scope["type"] == "http" else ""
        if not (path == "/api" or path.startswith("/api/")):
            await self.app(scope, receive, send)
            return
        served = self.build.current()
        if served is None:
            await self.app(scope, receive, send)
            return
        stamp = (HEADER.encode(), served.encode())
        page = _header(scope)
        if page is not None and page != served and starts_with_settings(scope["method"], path):
            # its body unread: the connection closes (an unread body cannot be skipped)
            await send_json(send, 409, "PageOutdated", OUTDATED, (stamp, (b"connection", b"close")))
            return

        async def stamped(message: Message) -> None:
            passed = scope.get("state", {}).get(TOKEN_PASSED)  # set by deps.require_token
            if message["type"] == "http.response.start" and message["status"] != 401 and passed:
                message = {**message, "headers": [*message.get("headers", []), stamp]}
            await send(message)

        await self.app(scope, receive, stamped)
