"""Issue 29 part 2 in a real browser on a real server: the Train form marks a dataset folder as
regularisation images, sets the prior loss weight and differential output preservation, and the
preflight shows the folder marked (its loss weight times the prior loss weight) and the
preservation line with its cost per step."""

from __future__ import annotations

import pytest
from tests.e2e.ui_pages import open_page
from tests.e2e.ui_uploads import upload_captioned

# browser test of one screen (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_reg_folder_prior_loss_weight_and_preservation_in_the_preflight(studio, browser) -> None:
    url = str(studio["url"])
    with open_page(browser) as page:
        upload_captioned(page, url, "me", 2, "sks, a person")
        upload_captioned(page, url, "people", 4, "a person")
        page.goto(f"{url}/#/train/me")
        page.locator('[name="resolution"]').fill("32")
        page.locator('[name="trigger_word"]').fill("sks")
        page.get_by_role("button", name="Several folders…").click()
        page.get_by_label("folder 2", exact=True).select_option("people")
        page.get_by_label("regularisation 2", exact=True).check()
        page.locator('[name="prior_loss_weight"]').fill("0.5")
        page.get_by_text("Advanced settings").click()
        page.get_by_label("preservation class word").fill("person")
        page.get_by_role("button", name="Check").click()
        entries = page.get_by_test_id("preflight-entries")
        entries.wait_for()
        rows = entries.locator("tbody tr").all_inner_texts()
        assert [r.split("\t") for r in rows] == [
            ["me", "2", "× 1", "2", "33.3 %", "1"],
            ["people (regularisation)", "4", "× 1", "4", "66.7 %", "0.5"],
        ], rows
        line = page.get_by_test_id("preflight-preservation").inner_text()
        assert line == (
            "Output preservation: the base model's output on the captions with the trigger word replaced by "
            "'person', weight 1: one extra no-grad forward + one extra forward/backward per micro-batch "
            "(about 1.7-2x a step's compute)"
        ), line
