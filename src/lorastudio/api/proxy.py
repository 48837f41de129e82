"""The studio behind a reverse proxy: its sub-path, and no proxied request without a token.

- `RootPath` (settings.root_path, LORASTUDIO_ROOT_PATH / `serve --root-path`): a request whose path
  is under the root path (`/studio/api/info`, sent by a proxy that keeps the prefix) is answered
  as the path below it (`/api/info`): the ASGI way, `root_path` set in the scope and `path` kept
  whole, so Starlette's routing, static files and redirects (`/studio/api/runs/` ->
  `/studio/api/runs`) see it. A request outside it (on this machine, or from a proxy that strips
  the prefix) is answered as before. Our own middleware and the 405's Allow read the path below
  the root (`route_path`).
- `ProxiedNeedsToken`: with no API token, a request that carries a forwarding proxy's header
  (remote_access.PROXY_HEADERS: Forwarded, X-Forwarded-For / -Host / -Proto, X-Real-IP, Via) is
  refused 403 `ProxyNeedsToken`. A studio without a token trusts whoever reaches its loopback
  port to be on this machine; a proxy in front of it (`proxy_pass http://127.0.0.1:7860`) makes
  everyone who reaches the proxy such a client: the run list, datasets and LoRAs were readable
  and (by a client that sends no Origin, e.g. curl) writable from the network. nginx adds none
  of these headers unless told (`proxy_set_header X-Forwarded-For ...`, in README's example);
  Caddy, Traefik and Apache add X-Forwarded-For by default.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from lorastudio.api.hosts import send_json
from lorastudio.remote_access import PROXY_HEADERS


def route_path(scope: Scope) -> str:
    """The request's path below its root path (`scope["root_path"]`, set by RootPath), as
    Starlette's router matches it (its private get_route_path, restated: an upgrade cannot take
    it away)."""
    path: str = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :]
    return path


class RootPath:
    """ASGI middleware: answer requests under `root` as the paths below it (module docstring)."""

    def __init__(self, app: ASGIApp, root: str):
        self.app = app
        self.root = root

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] in ("http", "websocket") else ""
        if self.root and path == self.root and scope["type"] == "http":
            # `/studio` -> `/studio/`: the UI's relative URLs resolve against its folder
            query = scope.get("query_string", b"").decode("latin-1")
            location = f"{self.root}/" + (f"?{query}" if query else "")
            await send(
                {
                    "type": "http.response.start",
                    "status": 308,
                    "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        if self.root and path.startswith(self.root + "/"):
            scope = {**scope, "root_path": scope.get("root_path", "") + self.root}
        await self.app(scope, receive, send)


def proxy_header(scope: Scope) -> str | None:
    """The name of the first forwarding proxy header the request carries (None: none)."""
    for key, _ in scope.get("headers", ()):
        if key.lower() in PROXY_HEADERS:
            return key.decode("latin-1")
    return None


class ProxiedNeedsToken:
    """ASGI middleware: with `token_set` False, refuse (403) a request that came through a
    forwarding proxy (module docstring)."""

    def __init__(self, app: ASGIApp, token_set: bool):
        self.app = app
        self.token_set = token_set

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token_set or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = proxy_header(scope)
        if header is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        detail = (
            f"request refused: it came through a proxy (its {header} header) and this studio has no"
            " API token, so everyone who reaches the proxy would use it as if on this machine; set"
            " LORASTUDIO_API_TOKEN to serve through a proxy (the web UI asks for it once), or reach the"
            " studio on this machine without the proxy"
        )
        await send_json(
            send, 403, "ProxyNeedsToken", detail
        )  # HostGuard, outside, adds the anti-framing headers
