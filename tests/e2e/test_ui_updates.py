"""What only a browser shows of session 40's changes, on a real server in Debian's Chromium: a page
told that the studio was updated under it (its server's build id changed: RELIABILITY 2061) asks
for a reload and starts nothing, the Start button reading why (its accessible description:
RELIABILITY 2060); and the browser's own EventSource, its stream cut before any event, reconnects
naming where the stream began (Last-Event-ID: RELIABILITY 2050).

The studio serves a copy of the built UI whose `build-id.txt` a test rewrites (the server reads it
again when it changes: api/web_build.py), as an upgrade under an open tab does; the event stream
passes a TCP relay that cuts it (tests/e2e/cut_proxy.py)."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import WEB_DIST, _require_ui, _running_studio
from tests.e2e.cut_proxy import CutProxy
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page
from ui_uploads import api_json

WIDE = {"width": 1280, "height": 900}
STALE = "The studio was updated: reload this page."
EVENTS = b"GET /api/train/events "


@pytest.fixture(scope="module")
def updatable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A running server of the tiny FLUX model and a dataset `shapes`, serving a copy of the built
    UI: {"url", "home", "build_file" (its build-id.txt), "build" (the id the bundle was built with)}."""
    from lorastudio.tiny import make_sample_dataset, save_tiny_model

    _require_ui()
    home = tmp_path_factory.mktemp("home-updates")
    save_tiny_model("flux", home / "models" / "tiny-flux")
    make_sample_dataset(home / "datasets" / "shapes")
    web = tmp_path_factory.mktemp("web") / "web_dist"
    shutil.copytree(WEB_DIST, web)
    build_file = web / "build-id.txt"
    with _running_studio(home, {}, web_dist=web) as url:
        yield {
            "url": url,
            "home": home,
            "build_file": build_file,
            "build": build_file.read_text(encoding="utf-8").strip(),
        }


@pytest.mark.timeout(180)
def test_a_page_of_an_older_build_asks_for_a_reload_and_starts_nothing(
    updatable, browser, artifacts: Path
) -> None:
    """The page is served, then the server's build changes (an upgrade under the open tab): its
    next answer (a Check: everything but a start goes on) shows the banner, and Start training is
    refused in the form, the refusal read as the Start button's description; no run is made. A
    roll back to the page's build takes the banner away. On the old code no banner comes (no build
    id is said) and the Start goes out (no refusal)."""
    url, build_file, build = str(updatable["url"]), Path(updatable["build_file"]), str(updatable["build"])
    assert build, "the built UI has no build id (web_dist/build-id.txt)"
    with open_page(browser, viewport=WIDE) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"{url}/#/train/shapes")
            expect(page.locator('[name="data_dir"]')).to_have_value("shapes")
            page.locator('[name="resolution"]').fill("32")
            banner = page.get_by_test_id("updated-banner")
            page.get_by_role("button", name="Check").click()
            page.get_by_test_id("preflight").wait_for()
            expect(banner).to_have_count(0)  # the same build: nothing said

            build_file.write_text(
                "e2e-updated-build\n", encoding="utf-8"
            )  # the studio upgraded under the open tab
            page.get_by_role(
                "button", name="Check"
            ).click()  # a Check still goes on; its answer names the build
            expect(banner).to_be_visible()
            expect(banner).to_contain_text(STALE)
            expect(banner.get_by_role("button", name="Reload")).to_be_visible()

            start = page.get_by_role("button", name="Start training")
            start.click()
            refusal = page.get_by_test_id("form-errors")
            expect(refusal).to_contain_text("nothing was started")
            # the refusal is what the Start button reads when it is reached again (RELIABILITY 2060)
            expect(start).to_have_accessible_description(re.compile(re.escape(STALE)))
            assert page.url.endswith("#/train/shapes")  # stayed on the form
            assert api_json(url, "/api/runs")["runs"] == []  # nothing started

            build_file.write_text(build + "\n", encoding="utf-8")  # rolled back to the page's own build
            page.get_by_role("button", name="Check").click()
            expect(banner).to_have_count(0)
            assert errors == []
        except Exception:
            page.screenshot(path=artifacts / "updates-stale-failure.png", full_page=True)
            raise
        finally:
            build_file.write_text(build + "\n", encoding="utf-8")


@pytest.mark.timeout(120)
def test_an_event_stream_cut_before_its_first_event_reconnects_from_where_it_began(
    updatable, browser, artifacts: Path
) -> None:
    """The page's EventSource (the app's own, web/src/api/training.tsx) reaches the studio through
    a relay; its stream is cut after the server's `: connected` and before any event. The browser
    reconnects by itself and names the position the stream began at (`Last-Event-ID`), so the
    events of its reconnect delay are sent on (tests/api/test_api_sse.py checks that they come
    once). On the old code the stream said no `id:` before an event: the reconnect names none."""
    port = int(str(updatable["url"]).rsplit(":", 1)[1])
    with CutProxy(port) as proxy, open_page(browser, viewport=WIDE) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"{proxy.url}/#/runs")
            (first, head), *_ = proxy.wait_for(EVENTS, 1, timeout_s=60)
            assert b"last-event-id" not in head.lower()  # a fresh stream
            # its opening in, no event yet: `: connected` (and now the position) is the first
            # piece of the answer (chunked: its CRLF last), sent at once
            opening = b""
            for _ in range(600):
                opening = proxy.answer(first)
                if b": connected\n\n" in opening and opening.endswith(b"\n"):
                    break
                page.wait_for_timeout(50)
            # the stream is the last answer on its connection (a kept-alive one may hold others before)
            answer = opening[opening.rindex(b"HTTP/1.1 ") :].split(b"\r\n\r\n", 1)[1]
            assert b"data:" not in answer, answer  # cut before any event
            said = re.search(rb"^id: (\d+)$", answer, re.MULTILINE)
            before = Counter((id(conn), h) for conn, h in proxy.requests(EVENTS))
            first.cut()
            # the browser's own reconnect (Chromium: ~3 s): the one request more, on any connection
            later = proxy.wait_for(EVENTS, before.total() + 1, timeout_s=60)
            heads = list((Counter((id(conn), h) for conn, h in later) - before).elements())
            assert heads, later
            heads = [h for _, h in heads]
            named = re.search(rb"(?im)^last-event-id: *(\S+)", heads[0])
            assert named is not None, f"the reconnect named no Last-Event-ID: {heads[0]!r}"
            assert said is not None, f"the stream named no position before its first event: {answer!r}"
            assert named.group(1) == said.group(1), (named.group(1), said.group(1))
            assert errors == []
        except Exception:
            page.screenshot(path=artifacts / "updates-stream-failure.png", full_page=True)
            raise
