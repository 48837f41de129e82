"""The API docs pages load only the studio's own files (api/docs_pages.py; session 33 offlinedocs,
fix 1154): FastAPI's pages loaded Swagger UI and ReDoc from cdn.jsdelivr.net, blank on a host
without internet access. tests/e2e/test_ui_docs_offline.py renders them in a browser (slow)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.api.docs_pages import ASSETS_DIR, REDOC_FILES, SWAGGER_FILES
from lorastudio.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-docs"
TYPES = {".js": ("text/javascript", "application/javascript"), ".css": ("text/css",)}


class _Refs(HTMLParser):
    """Every URL a page names: src, href, spec-url and data-spec-url attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href", "spec-url", "data-spec-url") and v]


def _refs(html: str) -> list[str]:
    parser = _Refs()
    parser.feed(html)
    return parser.urls


def _web_dist(tmp_path: Path) -> Path:
    """A built UI with the docs viewers' files (stand-ins: the names and kinds are what counts)."""
    web = tmp_path / "web"
    (web / ASSETS_DIR).mkdir(parents=True)
    (web / "index.html").write_text("<p>ui</p>")
    for name in (*SWAGGER_FILES, *REDOC_FILES):
        (web / ASSETS_DIR / name).write_text(f"/* {name} */")
    return web


@pytest.mark.parametrize("root_path", ["", "/studio"])
def test_docs_pages_load_only_the_studios_own_files(
    settings: Settings, tmp_path: Path, root_path: str
) -> None:
    secured = settings.model_copy(update={"api_token": TOKEN, "root_path": root_path})
    with TestClient(create_app(secured, web_dist=_web_dist(tmp_path)), base_url=LOOPBACK) as client:
        for page, files in (("docs", SWAGGER_FILES), ("redoc", REDOC_FILES)):
            url = f"{LOOPBACK}{root_path}/{page}"
            res = client.get(url, params={"token": TOKEN})
            assert res.status_code == 200 and res.headers["content-type"].startswith("text/html"), res.text
            csp = res.headers["content-security-policy"]
            assert "script-src 'self';" in csp and "connect-src 'self';" in csp and "http" not in csp, csp
            assert "<script>" not in res.text  # no inline script: the CSP allows none
            refs = _refs(res.text)
            # relative, so under a proxy's sub-path they stay under it
            assert refs and all(not urlsplit(r).scheme and not r.startswith("/") for r in refs), refs
            assert f"openapi.json?token={TOKEN}" in refs, refs
            assets = {r for r in refs if not r.startswith("openapi.json")}
            assert assets == {f"{ASSETS_DIR}/{name}" for name in files}, assets
            for ref in sorted(assets):
                got = client.get(urljoin(url, ref))  # as the browser resolves it, without the token
                kinds = TYPES[Path(ref).suffix]
                assert got.status_code == 200, ref
                assert got.headers["content-type"].split(";")[0] in kinds, (ref, got.headers["content-type"])
            assert (
                client.get(urljoin(url, f"openapi.json?token={TOKEN}")).json()["info"]["title"]
                == "lorastudio"
            )
            assert client.get(url).status_code == 401  # the pages keep needing the token


def test_docs_pages_without_the_viewers_files_say_so(settings: Settings, tmp_path: Path) -> None:
    """An unbuilt UI (or an API-only install): a note naming the missing files and linking the
    schema, not a page that loads nothing."""
    with TestClient(create_app(settings, web_dist=tmp_path / "none"), base_url=LOOPBACK) as client:
        for page, name in (("docs", "swagger-ui-bundle.js"), ("redoc", "redoc.standalone.js")):
            res = client.get(f"/{page}")
            assert res.status_code == 200 and "build_web.sh" in res.text and name in res.text, res.text
            assert _refs(res.text) == ["openapi.json"] and "<script" not in res.text


def test_build_web_copies_every_file_the_pages_load() -> None:
    """scripts/build_web.sh puts each file a page names into web_dist/docs-assets (the vendors'
    from node_modules, swagger-init.js from web/public), from pinned devDependencies."""
    script = (ROOT / "scripts" / "build_web.sh").read_text(encoding="utf-8")
    package = (ROOT / "web" / "package.json").read_text(encoding="utf-8")
    for name in (*SWAGGER_FILES, *REDOC_FILES):
        copied = re.search(rf"/{re.escape(name)}\b", script) is not None
        assert copied or (ROOT / "web" / "public" / ASSETS_DIR / name).is_file(), name
    for dependency in ("swagger-ui-dist", "redoc"):
        assert re.search(rf'"{dependency}": "\d+\.\d+\.\d+"', package), dependency  # exact versions
