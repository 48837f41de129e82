"""A new user's journey at a phone's width (session 36 journey audit) in a real browser on a real
server: a long Datasets list narrowed by name (RELIABILITY 1413), and a Check refused for settings
scrolled out of sight, listed by the form's buttons, each a way to its field (RELIABILITY 1410).
Screens shot at 1280 and 420 px (no sideways scrolling)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page

# browser test of two screens (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow

NARROW = {"width": 420, "height": 860}


def _in_viewport(page, locator) -> bool:
    """Whether `locator`'s box lies (at least partly) inside the page's viewport now."""
    box = locator.bounding_box()
    height = page.viewport_size["height"]
    return box is not None and box["y"] < height and box["y"] + box["height"] > 0


@pytest.mark.timeout(120)
def test_find_a_dataset_and_go_to_a_refused_setting(studio, browser, shoot) -> None:
    url, home = str(studio["url"]), Path(studio["home"])
    names = [f"set-{i:02d}" for i in range(9)] + ["portraits-2026"]
    for name in names:  # a long-used home: ten datasets of one captioned image each
        folder = home / "datasets" / name
        folder.mkdir(parents=True)
        Image.new("RGB", (32, 32), "red").save(folder / "a.png")
        (folder / "a.txt").write_text("a red square", encoding="utf-8")
    errors: list[str] = []
    with open_page(browser, viewport=NARROW) as page:
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/#/datasets")
        rows = page.locator("tbody tr")
        expect(rows).to_have_count(len(names))
        find = page.get_by_role("searchbox", name="find datasets by name")
        find.fill("PORTRAITS")
        expect(rows).to_have_count(1)
        expect(page.get_by_test_id("datasets-count")).to_have_text(f"1 of {len(names)} datasets")
        shoot(page, "journey-datasets-found")
        page.set_viewport_size(NARROW)
        rows.get_by_role("link", name="Train on it").click()

        # Train at 420 px: two values the server refuses, Check pressed at the foot of the form
        page.locator('[name="resolution"]').fill("33")
        page.locator('[name="lora_rank"]').fill("0")
        check = page.get_by_role("button", name="Check")
        check.scroll_into_view_if_needed()
        check.click()
        summary = page.get_by_test_id("problem-summary")
        expect(summary).to_contain_text("2 settings need a change")
        assert _in_viewport(page, summary), "the list of refused settings is out of sight"
        assert not _in_viewport(page, page.locator('[name="resolution"]')), "the field was in sight already"
        summary.get_by_role("button", name="Resolution").click()
        resolution = page.locator('[name="resolution"]')
        expect(resolution).to_be_focused()
        assert _in_viewport(page, resolution)
        expect(resolution.locator("xpath=..")).to_contain_text("must be a multiple of 16 for flux")
        shoot(page, "journey-train-problems")
        # each correction takes its field off the list; Check again: no list, the report
        page.set_viewport_size(NARROW)
        resolution.fill("32")
        page.locator('[name="lora_rank"]').fill("4")
        expect(summary).to_have_count(0)
        check.click()
        page.get_by_test_id("preflight").wait_for()
        expect(summary).to_have_count(0)
    assert errors == []
