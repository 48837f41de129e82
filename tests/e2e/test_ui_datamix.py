"""Issue 29 parts 1, 3 and 5 in a real browser on a real server: the Train form's datasets list
editor sends two stored datasets with their repeats and caption options and the preflight shows
each one's share, the example captions and the buckets of each resolution; the dataset screen's
"Edit all captions" previews, then rewrites every caption on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page
from tests.e2e.ui_uploads import upload_captioned

# browser test of one screen (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_datasets_editor_preflight_and_bulk_captions(studio, browser) -> None:
    url = str(studio["url"])
    with open_page(browser) as page:
        upload_captioned(page, url, "person", 2, "sks, a person")
        upload_captioned(page, url, "scenery", 6, "a landscape, green")
        page.goto(f"{url}/#/train/person")
        page.locator('[name="resolution"]').fill("32, 64")
        page.locator('[name="shuffle_tags"]').check()
        page.get_by_role("button", name="Several folders…").click()
        assert page.get_by_label("folder 1", exact=True).input_value() == "person"
        page.get_by_label("folder 2", exact=True).select_option("scenery")
        page.get_by_label("repeats 1", exact=True).fill("3")
        page.get_by_label("loss weight 2", exact=True).fill("0.5")
        page.get_by_label("shuffle tags 1", exact=True).select_option("off")  # its own caption options
        page.get_by_label("tag dropout 2", exact=True).fill("0.25")
        with page.expect_request("**/api/train/preflight") as sent:
            page.get_by_role("button", name="Check").click()
        assert sent.value.post_data_json["config"]["datasets"] == [
            {"path": "person", "repeats": 3, "shuffle_tags": False},
            {"path": "scenery", "loss_weight": 0.5, "tag_dropout": 0.25},
        ]
        entries = page.get_by_test_id("preflight-entries")
        entries.wait_for()
        rows = entries.locator("tbody tr").all_inner_texts()
        assert [r.split("\t") for r in rows] == [
            ["person", "2", "× 3", "12", "50.0 %", "1"],  # 2 images x 2 resolutions x 3
            ["scenery", "6", "× 1", "12", "50.0 %", "0.5"],
        ], rows
        captions = page.get_by_test_id("preflight-captions").inner_text()
        assert "8 caption variants per image" in captions and captions.count("\n") >= 3
        assert "32x32 × 8" in page.get_by_test_id("preflight-buckets-32").inner_text()
        assert "64x64 × 8" in page.get_by_test_id("preflight-buckets-64").inner_text()

        page.goto(f"{url}/#/datasets/scenery")
        page.get_by_text("Edit all captions").click()
        page.get_by_label("Find").fill("green")
        page.get_by_label("Replace with").fill("lush green")
        page.get_by_label("Prepend").fill("photo, ")
        page.get_by_role("button", name="Preview").click()
        result = page.get_by_test_id("bulk-result")
        result.get_by_text("Would change 6 of 6 caption(s).").wait_for()
        folder = Path(str(studio["home"])) / "datasets" / "scenery"
        assert (
            folder / "scenery0.txt"
        ).read_text().strip() == "a landscape, green 0"  # a preview writes nothing
        page.get_by_role("button", name="Apply to all captions").click()
        result.get_by_text("Changed 6 of 6 caption(s).").wait_for()
        assert (folder / "scenery0.txt").read_text().strip() == "photo, a landscape, lush green 0"
        # the grid shows the new captions once the screen's reload after Apply lands (the
        # old cards show meanwhile): wait for it, not for a card, which is there already
        expect(page.get_by_test_id("thumb-grid").locator("textarea").first).to_have_value(
            "photo, a landscape, lush green 0"
        )
