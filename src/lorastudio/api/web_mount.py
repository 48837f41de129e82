"""Which methods a path takes (405's Allow), and the web UI's mount kept off the server's own paths.

- `WebMount`: the built UI mounted at "/" (api/app.py), matching no path of the server's own
  (`/api`, `/gallery`, `/openapi.json`, `/docs`, `/redoc`, and below). Starlette's router takes a
  full match over a route that matched the path alone (another method), and a mount at "/"
  matches every path fully: with the UI built, `GET /api/train/stop` was the static files' 404
  (not 405 naming POST), `PATCH /api/runs/x` a 405 saying `Allow: GET, HEAD` (the static
  files' methods) and `/api/runs/` a 404 instead of the redirect to `/api/runs`.
- `AllowTable`: every method of every route whose path matches, for a 405's Allow header (RFC
  9110 section 15.5.6): Starlette named the methods of the first route that matched the path
  (`PATCH /api/runs/x` said GET though DELETE is taken there too), and never HEAD, which every GET
  route answers (api/downloads.py HeadAsGet).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.routing import BaseRoute, Match, Mount
from starlette.types import Scope

from lorastudio.api.proxy import route_path
from lorastudio.remote_access import SERVER_PATHS


def is_server_path(path: str) -> bool:
    """Whether `path` is one of the server's own (SERVER_PATHS, or below one)."""
    return any(path == root or path.startswith(root + "/") for root in SERVER_PATHS)


class WebMount(Mount):
    """A Mount that never matches a server path (module docstring)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        # the path below a root path (api/proxy.py RootPath)
        if scope["type"] == "http" and is_server_path(route_path(scope)):
            return Match.NONE, {}
        return super().matches(scope)


class AllowTable:
    """The methods the routes of an app take, by path (built from the routes' path patterns)."""

    def __init__(self, routes: Iterable[BaseRoute]):
        self._routes = [
            (route.path_regex, frozenset(route.methods or ()))
            for route in routes
            if getattr(route, "methods", None) and hasattr(route, "path_regex")
        ]

    def methods(self, path: str) -> list[str]:
        """The methods `path` takes, sorted, HEAD with GET; [] when no route has that path."""
        taken: set[str] = set()
        for regex, methods in self._routes:
            if regex.match(path):
                taken |= methods
        if "GET" in taken:
            taken.add("HEAD")
        return sorted(taken)
