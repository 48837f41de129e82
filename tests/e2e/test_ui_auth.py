"""A studio behind an API token, in a real browser: the UI asks for the token once, keeps it in
localStorage and sends it as a header; the event stream (and images, downloads) carry the
HttpOnly cookie of the browser session the token opened, never the token (session 32 tokenurl)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from tests.e2e.conftest import _running_studio
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page

WIDE = {"width": 1280, "height": 900}


@pytest.mark.timeout(120)
def test_token_is_asked_once_and_sent(token_studio, browser, artifacts: Path, shoot) -> None:
    url, token = token_studio["url"], token_studio["token"]
    with open_page(browser, viewport=WIDE) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        events: list[tuple[str, int]] = []
        page.on(
            "response",
            lambda res: events.append((res.url, res.status)) if "/api/train/events" in res.url else None,
        )
        try:
            page.goto(f"{url}/#/datasets")
            dialog = page.get_by_role("dialog", name="API token required")
            dialog.wait_for()
            assert page.get_by_text("Cannot load the studio's information").count() == 0
            shoot(page, "token-dialog")
            # a wrong token is refused and asked for again
            dialog.get_by_label("API token").fill("wrong")
            dialog.get_by_role("button", name="Save token").click()
            page.get_by_text("The server refused the saved token").wait_for()
            dialog.get_by_label("API token").fill(token)
            dialog.get_by_label("API token").press("Enter")
            page.get_by_text("No datasets yet").wait_for()
            expect(page.get_by_role("dialog")).to_have_count(0)
            assert page.evaluate("localStorage.getItem('lorastudio.token')") == token
            # a new page load uses the saved token: no question, and the event stream is authorised
            # by the session cookie (it carried `?token=<the API token>`)
            with page.expect_response(lambda res: "/api/train/events" in res.url) as stream:
                page.reload()  # (before: 500 ms for the stream's answer, which a loaded host passed)
            assert stream.value.status == 200, events
            assert all(token not in u and "token=" not in u for u, _ in events), events
            cookies = [c for c in page.context.cookies() if c["name"].startswith("lorastudio_session")]
            assert len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict", (
                cookies
            )
            assert "lorastudio_session" not in page.evaluate("document.cookie")  # no script reads it
            page.get_by_text("No datasets yet").wait_for()
            expect(page.get_by_role("dialog")).to_have_count(0)
            assert errors == [], f"JavaScript errors in the page: {errors}"
        except Exception:
            page.screenshot(path=artifacts / "failure-token.png", full_page=True)
            raise


@pytest.mark.slow  # two server starts (~30 s on the 2-core host); the renewal logic is in vitest (browserUrls.test.ts)
@pytest.mark.timeout(240)
def test_after_a_restart_the_ui_opens_a_new_session_for_its_stream(browser, tmp_path: Path) -> None:
    """Sessions live in the server's memory: after a restart the stream the browser reconnects is
    refused (401); the UI then opens a new session with the token it holds and a new stream, with
    no question (the `?token=` stream survived a restart by itself)."""
    home = tmp_path / "home"
    home.mkdir()
    token = "e2e-" + os.urandom(8).hex()
    env = {"LORASTUDIO_API_TOKEN": token}
    seen: list[tuple[str, str, int]] = []
    with open_page(browser, viewport=WIDE) as page:
        page.on("response", lambda res: seen.append((res.request.method, res.url, res.status)))
        with _running_studio(home, env) as url:
            port = urlsplit(url).port
            page.goto(f"{url}/#/datasets")
            page.evaluate("(t) => localStorage.setItem('lorastudio.token', t)", token)
            with page.expect_response(lambda res: "/api/train/events" in res.url and res.status == 200):
                page.reload()
        before = len(seen)
        with _running_studio(home, env, port):
            deadline = time.monotonic() + 60
            after: list[tuple[str, str, int]] = []
            while time.monotonic() < deadline:
                after = seen[before:]
                if any(m == "GET" and "/api/train/events" in u and s == 200 for m, u, s in after):
                    break
                page.wait_for_timeout(500)
        assert any(m == "GET" and "/api/train/events" in u and s == 401 for m, u, s in after), after
        assert any(m == "POST" and "/api/session" in u and s == 200 for m, u, s in after), after
        assert any(m == "GET" and "/api/train/events" in u and s == 200 for m, u, s in after), after
        expect(page.get_by_role("dialog")).to_have_count(0)  # the token was not asked for
        assert all(token not in u for _, u, _ in seen)
