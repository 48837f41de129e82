"""The API docs pages: /openapi.json, /docs (Swagger UI) and /redoc, with every file they load
served by the studio itself.

FastAPI's `get_swagger_ui_html` / `get_redoc_html` load their scripts and styles from
cdn.jsdelivr.net (and a favicon from fastapi.tiangolo.com, fonts from Google): on a host without
internet access (an air-gapped studio) both pages stayed blank. The viewers' files now come with
the built web UI: scripts/build_web.sh copies swagger-ui-dist's `swagger-ui-bundle.js` and
`swagger-ui.css` and redoc's `redoc.standalone.js` (pinned devDependencies of web/) beside
web/public/docs-assets/swagger-init.js into `web_dist/docs-assets/`, which the UI's static mount
serves at `/docs-assets/...` (not a server path: api/web_mount.py), like the UI's own assets
without the token (public files; the schema keeps needing it).

The pages are written here rather than by FastAPI's functions, which put Swagger UI's start in
an inline script: these load only files of the studio, so each page's Content-Security-Policy
(`DOCS_CSP`) says `script-src 'self'` and `connect-src 'self'`: the page runs no script and
reaches no address beyond the studio. ReDoc's styled-components write `<style>` elements
(`style-src 'unsafe-inline'`), its search runs in a worker made from a blob (`worker-src blob:`),
and both viewers' stylesheets draw icons from data: URLs.

Every URL a page names is relative, so under a proxy's sub-path (api/proxy.py) `/studio/docs`
loads `/studio/docs-assets/...` and `/studio/openapi.json`. The token: the pages need it when one
is set (bearer header, `?token=`, or the browser session cookie, api/deps.py); a page opened with
`?token=` fetches the schema with it (the cookie goes along by itself). When the viewers' files
are missing (the UI not built, or an API-only install) the page says so and links the schema
rather than loading nothing.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.params import Depends as DependsParam
from fastapi.responses import HTMLResponse, JSONResponse

ASSETS_DIR = "docs-assets"  # under web_dist; served by the UI's mount at /docs-assets/
SWAGGER_FILES = ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-init.js")
REDOC_FILES = ("redoc.standalone.js",)
DOCS_CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'self'",
    )
)
TITLE = "lorastudio API"


def add_docs(app: FastAPI, guarded: list[DependsParam], web_dist: Path) -> None:
    """Add /openapi.json, /docs and /redoc to `app`, each with the `guarded` dependencies (the
    token check). The pages load the viewers' files from `web_dist`/docs-assets (module
    docstring); which are there is looked up on each request (the UI can be rebuilt while the
    server runs)."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=guarded)
    def openapi_json() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=guarded)
    def swagger(request: Request) -> HTMLResponse:
        url = _schema_url(request)
        return _page(web_dist, SWAGGER_FILES, "Swagger UI", _swagger_body(url), url)

    @app.get("/redoc", include_in_schema=False, dependencies=guarded)
    def redoc(request: Request) -> HTMLResponse:
        url = _schema_url(request)
        return _page(web_dist, REDOC_FILES, "ReDoc", _redoc_body(url), url)


def _schema_url(request: Request) -> str:
    """The schema's URL for a page: relative (under a proxy's sub-path the page /studio/docs reads
    /studio/openapi.json), with the `?token=` the page was opened with."""
    token = request.query_params.get("token")
    return "openapi.json" + (f"?token={quote(token, safe='')}" if token else "")


def _asset_url(name: str) -> str:
    """A viewer's file, relative to the page (/docs -> /docs-assets/NAME)."""
    return f"{ASSETS_DIR}/{name}"


def _swagger_body(schema_url: str) -> str:
    """Swagger UI's page body: swagger-init.js starts it on #swagger-ui with data-spec-url."""
    return (
        f'<div id="swagger-ui" data-spec-url="{escape(schema_url)}"></div>\n'
        f'<script src="{_asset_url("swagger-ui-bundle.js")}"></script>\n'
        f'<script src="{_asset_url("swagger-init.js")}"></script>'
    )


def _redoc_body(schema_url: str) -> str:
    """ReDoc's page body: the standalone bundle starts itself on the <redoc spec-url> element."""
    return (
        "<style>body { margin: 0; padding: 0; }</style>\n"  # ReDoc's layout fills the window
        f'<redoc spec-url="{escape(schema_url)}"></redoc>\n'
        f'<script src="{_asset_url("redoc.standalone.js")}"></script>'
    )


def _page(web_dist: Path, files: tuple[str, ...], viewer: str, body: str, schema_url: str) -> HTMLResponse:
    """The page of a viewer whose `files` are all in web_dist/docs-assets, else a page naming the
    missing ones and linking the schema (`schema_url`); either with DOCS_CSP."""
    missing = [name for name in files if not (web_dist / ASSETS_DIR / name).is_file()]
    head = '<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    head += f"<title>{TITLE}</title>\n"
    if missing:
        where = escape(str(web_dist / ASSETS_DIR))
        body = (
            f"<h1>{TITLE}</h1>\n<p>{viewer}'s files are not in this install ({escape(', '.join(missing))}"
            f" missing from {where}): build the web UI with <code>bash scripts/build_web.sh</code>."
            f' The schema itself is at <a href="{escape(schema_url)}">openapi.json</a>.</p>'
        )
    elif "swagger-ui.css" in files:
        head += f'<link rel="stylesheet" href="{_asset_url("swagger-ui.css")}">\n'
    html = f'<!DOCTYPE html>\n<html lang="en">\n<head>\n{head}</head>\n<body>\n{body}\n</body>\n</html>\n'
    return HTMLResponse(html, headers={"Content-Security-Policy": DOCS_CSP, "Cache-Control": "no-store"})
