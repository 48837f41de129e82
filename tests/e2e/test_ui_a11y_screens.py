"""A change of screen for a keyboard and a screen reader user, in Chromium on a real server
(RELIABILITY 1910, 1911, 1915): the tab's title follows the route, the skip link is the first Tab
stop and moves the focus past the top bar, a link followed inside a screen leaves the focus on the
new screen's main (not the page's body) with the screen said in a polite status, a focused button
draws the 2 px accent ring, and an inline form (an unusable folder's Rename) takes the focus.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.e2e.ui_pages import open_page, settle

# a browser test of the whole page (the unit tests hold each piece in jsdom)
pytestmark = pytest.mark.slow

_ACTIVE_JS = (
    "() => { const a = document.activeElement; return a ? a.tagName + (a.id ? '#' + a.id : '') : null; }"
)
_IN_MAIN_JS = (
    "() => !!document.activeElement && document.querySelector('main').contains(document.activeElement)"
)
_RING_JS = "e => { const s = getComputedStyle(e); return [s.outlineStyle, s.outlineWidth, s.outlineColor]; }"


@pytest.mark.timeout(240)
def test_screen_changes_keep_the_keyboard_and_say_where(studio, browser) -> None:
    url, home = str(studio["url"]), Path(studio["home"])
    shutil.copytree(Path(studio["sample"]), home / "datasets" / "shapes", dirs_exist_ok=True)
    (home / "datasets" / "what?").mkdir()  # a folder the studio cannot use: its Rename
    with open_page(browser, viewport={"width": 1280, "height": 800}) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/#/datasets")
        page.locator("main h1").first.wait_for()
        settle(page)
        assert page.title() == "Datasets – lorastudio"
        # the skip link: the first Tab stop, shown, and Enter moves the focus to the screen
        page.keyboard.press("Tab")
        skip = page.get_by_role("link", name="Skip to the screen")
        assert skip.evaluate("e => e === document.activeElement")
        box = skip.bounding_box()
        assert box is not None and box["y"] >= 0, box  # in view once focused
        page.keyboard.press("Enter")
        assert page.evaluate(_ACTIVE_JS) == "MAIN"
        assert page.url.endswith("#/datasets")  # the route kept
        page.keyboard.press("Tab")
        assert page.evaluate(_IN_MAIN_JS)
        # a focused button's ring: 2 px solid, the accent (#7c9cff), 3:1 and more on every surface
        rename = page.get_by_role("button", name="Rename")
        rename.focus()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Tab")  # focused by the keyboard: :focus-visible
        assert rename.evaluate(_RING_JS) == ["solid", "2px", "rgb(124, 156, 255)"]
        # the inline Rename form takes the focus (its field)
        page.keyboard.press("Enter")
        assert page.get_by_label("new name for what?").evaluate("e => e === document.activeElement")
        # a link inside the screen: the new screen's title, said, and the focus on its main
        link = page.get_by_role("link", name="shapes", exact=True)
        link.focus()
        page.keyboard.press("Enter")
        page.wait_for_url("**/#/datasets/shapes")
        page.locator("main h1").first.wait_for()
        settle(page)
        assert page.title() == "Dataset shapes – lorastudio"
        assert page.evaluate(_ACTIVE_JS) == "MAIN"
        assert page.get_by_test_id("screen-announcement").inner_text() == "Dataset shapes"
        page.keyboard.press("Tab")
        assert page.evaluate(_IN_MAIN_JS)  # on from the top of the new screen
        # Back: the title follows
        page.go_back()
        page.wait_for_url("**/#/datasets")
        assert page.title() == "Datasets – lorastudio"
        assert errors == []
