"""Session 38's new fields as a demanding user meets them, in a real browser on a real server (at
1280 and 320 px, keyboard only, a slow server): Generate's steps / size left to the family (a
placeholder muted and italic, a description in words: RELIABILITY 1840, 1842), the Train form's
validation seed and adapter hints (1681, 1790) read as each field's description, and no console
message on the way (no CSP violation of `script-src 'self'`, no React warning)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.ui_pages import open_page, settle

pytestmark = pytest.mark.slow  # a browser and a server: the e2e suite's slow marker

WIDTHS = ({"width": 1280, "height": 900}, {"width": 320, "height": 800})
# a control's accessible description as a screen reader gets it: the text of its aria-describedby
_DESCRIPTION_JS = """e => (e.getAttribute('aria-describedby') || '').split(/\\s+/).filter(Boolean)
  .map(id => document.getElementById(id)?.textContent || '').join(' ').trim()"""
_PLACEHOLDER_JS = """e => { const s = getComputedStyle(e, '::placeholder');
  return {style: s.fontStyle, colour: s.color, text: getComputedStyle(e).color}; }"""
_FITS_JS = "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
_FOCUS_RING_JS = "e => { const s = getComputedStyle(e); return s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0; }"


def _watch(page) -> list[str]:
    """Every console message of type error / warning and every uncaught error of `page`."""
    seen: list[str] = []
    page.on(
        "console", lambda m: seen.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
    )
    page.on("pageerror", lambda exc: seen.append(f"pageerror: {exc}"))
    return seen


def _slow(page, ms: int = 1500) -> None:
    """Every /api/ answer held back `ms` ms (a slow or loaded server)."""

    def hold(route) -> None:
        page.wait_for_timeout(ms)
        route.continue_()

    page.route("**/api/**", hold)


@contextmanager
def _slowed_page(browser, viewport: dict, shot: Path) -> Iterator[tuple[Any, list[str]]]:
    """A page at `viewport` whose API answers are held back (_slow), with its console watched
    (_watch: the list yielded beside it); a screenshot to `shot` when the test fails in it."""
    with open_page(browser, viewport=viewport, timeout_ms=60_000) as page:
        seen = _watch(page)
        _slow(page)
        try:
            yield page, seen
        except Exception:
            page.screenshot(path=shot, full_page=True)
            raise


@pytest.mark.timeout(240)
@pytest.mark.parametrize("viewport", WIDTHS, ids=("1280", "320"))
def test_generate_steps_and_size_left_to_the_family_read_as_such(
    studio, browser, artifacts: Path, viewport
) -> None:
    url = str(studio["url"])
    shot = artifacts / f"new-fields-generate-{viewport['width']}.png"
    with _slowed_page(browser, viewport, shot) as (page, seen):
        page.goto(f"{url}/#/generate")
        steps = page.locator('[name="gen_steps"]')
        steps.wait_for()
        page.wait_for_function("() => document.querySelector('[name=gen_width]').placeholder !== ''")
        settle(page)
        width = page.locator('[name="gen_width"]')
        assert width.input_value() == "" and width.get_attribute("placeholder") == "1024"  # tiny FLUX.1
        assert width.evaluate(_DESCRIPTION_JS) == "empty: the family's 1024"
        assert steps.evaluate(_DESCRIPTION_JS).startswith("empty: the family's")
        page.screenshot(path=artifacts / f"new-fields-generate-{viewport['width']}.png", full_page=True)
        assert page.evaluate(_FITS_JS), "the page scrolls sideways (the hints under the quad's fields)"
        look = width.evaluate(_PLACEHOLDER_JS)
        assert look["style"] == "italic" and look["colour"] != look["text"], look
        # keyboard only: Seed, then Steps, Width, Height in order, each with a visible focus ring
        page.locator('[name="gen_seed"]').focus()
        for name in ("gen_steps", "gen_width", "gen_height"):
            page.keyboard.press("Tab")
            focused = page.evaluate("() => document.activeElement.getAttribute('name')")
            assert focused == name
            assert page.locator(f'[name="{name}"]').evaluate(_FOCUS_RING_JS), f"{name}: no visible focus"
        page.keyboard.type("768")
        assert width.input_value() == ""  # typed into Height, the field focused
        assert page.locator('[name="gen_height"]').input_value() == "768"
        assert seen == [], seen


@pytest.mark.timeout(240)
@pytest.mark.parametrize("viewport", WIDTHS, ids=("1280", "320"))
def test_train_form_new_hints_are_their_fields_descriptions(
    studio, browser, artifacts: Path, viewport
) -> None:
    url = str(studio["url"])
    shot = artifacts / f"new-fields-train-{viewport['width']}.png"
    with _slowed_page(browser, viewport, shot) as (page, seen):
        page.goto(f"{url}/#/train")
        page.locator(".advanced summary").first.wait_for()
        settle(page)
        page.locator(".advanced summary").first.focus()
        page.keyboard.press("Enter")  # opened from the keyboard
        seed = page.locator('[name="validation_seed"]')
        seed.wait_for()
        assert "validation folder" in seed.evaluate(_DESCRIPTION_JS)
        assert (
            seed.evaluate("e => e.labels[0].querySelector('.field-label').textContent") == "Validation seed"
        )
        adapter = page.locator('[name="adapter"]')
        assert "FLUX.2 / klein / Z-Image LoKr" in adapter.evaluate(_DESCRIPTION_JS)
        importer = page.locator('[name="import_config"]')
        assert "Import a config" in importer.evaluate("e => e.labels[0].textContent")
        assert seen == [], seen


@pytest.mark.timeout(240)
def test_every_screen_leaves_the_console_empty_under_the_page_policy(
    studio, browser, artifacts: Path
) -> None:
    """Each screen of the top bar at 320 px on a slow server: no CSP violation (the page's policy
    says script-src 'self'), no React warning, no uncaught error."""
    url = str(studio["url"])
    with open_page(browser, viewport=WIDTHS[1], timeout_ms=60_000) as page:
        seen = _watch(page)
        _slow(page, 800)
        try:
            page.goto(f"{url}/#/datasets")
            for screen in ("datasets", "train", "live", "runs", "generate", "models"):
                page.goto(f"{url}/#/{screen}")
                page.locator("section.screen").first.wait_for()
                settle(page)
                assert seen == [], f"#{screen}: {seen}"
        except Exception:
            page.screenshot(path=artifacts / "new-fields-console.png", full_page=True)
            raise


@pytest.mark.timeout(420)
def test_sidecar_link_by_keyboard_downloads_under_the_runs_name(studio, browser, artifacts: Path) -> None:
    """The run page's Sidecar .json (RELIABILITY 1783) at 320 px: reached by Tab with a visible
    focus ring, Enter downloads `<output name>.json` holding that run's record; then Live's wait
    before its refused stream is reopened, counting down."""
    import json
    import shutil

    from tests.e2e.test_ui_a11y import _train

    url, home = str(studio["url"]), Path(studio["home"])
    shutil.copytree(Path(studio["sample"]), home / "datasets" / "shapes", dirs_exist_ok=True)
    run_id = _train(url, Path(studio["model"]))
    with open_page(browser, viewport=WIDTHS[1], timeout_ms=60_000, accept_downloads=True) as page:
        seen = _watch(page)
        try:
            page.goto(f"{url}/#/runs/{run_id}")
            link = page.get_by_role("link", name="Sidecar .json")
            link.wait_for()
            settle(page)
            page.get_by_role("link", name="Download LoRA").focus()
            page.keyboard.press("Tab")
            assert link.evaluate("e => e === document.activeElement")
            ring = link.evaluate(
                "e => { const s = getComputedStyle(e); return [s.outlineStyle, s.outlineWidth]; }"
            )
            assert ring[0] != "none" and ring[1] != "0px", ring
            with page.expect_download() as download:
                page.keyboard.press("Enter")
            got = download.value
            assert got.suggested_filename == "a11y-run.json"
            record = json.loads(Path(got.path()).read_text(encoding="utf-8"))
            assert record["config"]["output_name"] == "a11y-run"
            assert seen == [], seen
            # Live with that (latest) run, its event stream refused (a 503 past the server's stream
            # caps): "reconnecting in 3 s", counting down (RELIABILITY 1770, 1841), within 320 px
            page.route("**/api/train/events**", lambda route: route.fulfill(status=503, body="busy"))
            page.goto(f"{url}/#/live")
            page.reload()  # the stream the page holds opened before the route: a fresh one goes through it
            page.get_by_text("reconnecting in 3 s…").wait_for()
            page.get_by_text("reconnecting in 2 s…").wait_for(timeout=5_000)
            assert page.evaluate(_FITS_JS)
        except Exception:
            page.screenshot(path=artifacts / "new-fields-sidecar.png", full_page=True)
            raise
