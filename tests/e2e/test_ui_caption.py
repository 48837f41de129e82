"""Issue 29 part 8 in a real browser on a real server: "Caption with AI" on a dataset's page runs a
caption job with the tiny random Qwen2.5-VL, shows the outcome and the first captions, and the
page's counts follow (the captioned image kept its caption)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page

# browser test of one screen (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow


@pytest.mark.timeout(240)
def test_caption_with_ai(studio, browser) -> None:
    from lorastudio.tiny.vlm import save_tiny_vlm

    home = Path(studio["home"])
    vlm = save_tiny_vlm(home / "models" / "tiny-vlm")
    folder = home / "datasets" / "aicap"
    folder.mkdir(parents=True)
    Image.new("RGB", (40, 32), "red").save(folder / "a.png")
    Image.new("RGB", (40, 32), "blue").save(folder / "b.png")
    (folder / "b.txt").write_text("my own caption\n", encoding="utf-8")
    with open_page(browser, timeout_ms=120_000) as page:
        page.goto(f"{studio['url']}/#/datasets/aicap")
        expect(page.get_by_test_id("dataset-counts")).to_have_text("2 images · 1 captioned")
        page.get_by_test_id("caption-ai").click()
        page.get_by_test_id("caption-model").fill(str(vlm))
        page.get_by_test_id("caption-prefix").fill("sks")
        page.get_by_test_id("caption-start").click()
        status = page.get_by_test_id("caption-status")  # its words are also in the live region (1913)
        status.get_by_text("Caption job completed: 1 captioned, 1 kept their caption, 0 failed").wait_for()
        preview = page.get_by_test_id("caption-preview").locator("li").all_inner_texts()
        assert len(preview) == 1 and preview[0].startswith("a.png sks, ")
        page.get_by_text("2 images · 2 captioned").wait_for()
        assert (folder / "a.txt").read_text(encoding="utf-8").startswith("sks, ")
        assert (folder / "b.txt").read_text(encoding="utf-8") == "my own caption\n"
