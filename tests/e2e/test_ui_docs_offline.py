"""/docs and /redoc in a real browser that reaches nothing beyond the studio (an air-gapped host):
both viewers render the schema from the studio's own files, under the page's
Content-Security-Policy, with no request leaving the studio (session 33 offlinedocs, fix 1154)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from tests.e2e.ui_pages import open_page

WIDE = {"width": 1280, "height": 900}


@pytest.mark.slow  # a server start (~15 s on the 2-core host); tests/api/test_api_docs_pages.py checks the pages in-process
@pytest.mark.timeout(120)
def test_docs_pages_render_without_internet(token_studio, browser, artifacts: Path) -> None:
    url, token = token_studio["url"], token_studio["token"]
    studio = urlsplit(url).netloc
    with open_page(browser, viewport=WIDE) as page:
        outside: list[str] = []  # requests for any other host: refused, as on an air-gapped host

        def route(r) -> None:  # noqa: ANN001 (playwright's Route)
            if urlsplit(r.request.url).netloc == studio or r.request.url.startswith(("data:", "blob:")):
                r.continue_()
            else:
                outside.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(f"error: {exc}"))
        page.on(
            "console",
            lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None,
        )
        try:
            page.goto(f"{url}/docs?token={token}")
            # an operation of the schema, rendered by Swagger UI (the schema read with the token)
            page.locator(".opblock-summary-path", has_text="/api/train/start").first.wait_for()
            page.screenshot(path=artifacts / "docs-swagger.png")
            page.goto(f"{url}/redoc?token={token}")
            page.locator("h1", has_text="lorastudio").first.wait_for()  # ReDoc's title of the API
            page.get_by_text("/api/train/start").first.wait_for(state="attached")
            page.screenshot(path=artifacts / "docs-redoc.png")
            assert outside == [], f"requests beyond the studio: {outside}"
            # a blocked script or style (the page's CSP) or a failed asset is a console error; but
            # ReDoc's sidebar always shows Redocly's logo from cdn.redoc.ly: the CSP blocks it (no
            # request leaves) and ReDoc hides the image when it fails to load
            logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
            assert [p for p in problems if logo not in p] == [], problems
        except Exception:
            page.screenshot(path=artifacts / "docs-offline-failure.png", full_page=True)
            raise
