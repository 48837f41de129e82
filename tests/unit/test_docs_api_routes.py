"""Every route the app serves is in README.md (its method and path, the form "Every route, by
resource" lists them in) or on INTERNAL below, with the reason a user does not call it (read,
never run; about a second: one create_app).

The routes are walked from the app itself, not from /openapi.json, so a route left out of the
schema (the docs pages) counts too; the walk is checked against the schema so that a route kind it
does not know fails here rather than going unchecked. test_docs_claims checks the other way: every
route README names is one of the app's.
"""

from __future__ import annotations

import functools
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Mount, Route

from lorastudio.api.app import create_app
from lorastudio.settings import Settings

README = re.sub(r"\s+", " ", (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8"))

# Served, on purpose not in README's route tables: (method, path) -> why a user does not call it.
INTERNAL: dict[tuple[str, str], str] = {
    # the web UI's files and the docs pages' scripts (/docs-assets/); README's Quick start and
    # "Using it" name the UI's address, and no path under it is an API a script calls
    ("MOUNT", "/"): "the web UI's static files",
}


def _walk(routes: Iterable[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route under `routes`; a mount as ("MOUNT", its path). A route kind
    this does not know raises, so a new kind cannot slip by unchecked."""
    for route in routes:
        if isinstance(route, APIRoute | Route):
            for method in sorted(route.methods or ()):
                if method != "HEAD":  # answered as GET by the HeadAsGet middleware
                    yield method, prefix + route.path
        elif isinstance(route, Mount):
            yield "MOUNT", prefix + (route.path or "/")
        elif hasattr(route, "original_router"):  # fastapi 0.16x's included router, unflattened
            context = getattr(route, "include_context", None)
            yield from _walk(route.original_router.routes, prefix + getattr(context, "prefix", ""))
        else:
            raise AssertionError(f"a route kind this test does not know: {route!r}")


@functools.cache
def _served() -> tuple[frozenset[tuple[str, str]], dict[str, Any]]:
    """The routes the app serves, and its OpenAPI document (one create_app for both tests)."""
    with tempfile.TemporaryDirectory() as home:
        app = create_app(Settings(home=Path(home)))
        doc = app.openapi()
    return frozenset(_walk(app.routes)), doc


def _named(method: str, path: str) -> bool:
    """README names `METHOD path` (the path as written, or with other names in its braces)."""
    pattern = re.escape(path)
    pattern = re.sub(r"\\\{[^}]+\\\}", r"(?:\\{\\w+\\}|[A-Z_]+)", pattern)
    return re.search(rf"\b{method} {pattern}(?![\w/{{])", README) is not None


def test_every_served_route_is_in_readme_or_internal() -> None:
    served, doc = _served()
    schema = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert schema <= served, f"the walk missed routes of the schema: {sorted(schema - served)}"
    assert len(served) > 60, "the walk found too few routes"
    missing = sorted(
        f"{method} {path}"
        for method, path in served
        if (method, path) not in INTERNAL and not _named(method, path)
    )
    assert missing == [], (
        "served routes README does not name (add them to its 'Every route, by resource' tables, "
        f"or to INTERNAL here with the reason): {missing}"
    )


def test_internal_routes_are_served_and_not_also_documented() -> None:
    """An INTERNAL entry is a route the app serves (a stale entry would hide nothing) or the UI's
    mount, which is there only when the UI is built."""
    served, _ = _served()
    stale = [key for key in INTERNAL if key not in served and key != ("MOUNT", "/")]
    assert stale == [], f"INTERNAL names routes the app does not serve: {stale}"
    both = [f"{m} {p}" for m, p in INTERNAL if m != "MOUNT" and _named(m, p)]
    assert both == [], f"INTERNAL names routes README documents: {both}"
