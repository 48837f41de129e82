"""Issue 29 part 7 in a real browser on a real server: an upload with a broken image, its
caption and a .bmp stores the good files and says exactly which were stored and which refused;
the dataset is then deleted with the confirm dialog and leaves the list."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page


def _png(color: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (24, 24), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.timeout(120)
def test_upload_keeps_the_good_files_and_delete(studio, browser, tmp_path: Path) -> None:
    files = {
        "good.png": _png("red"),
        "good.txt": b"a red square",
        "broken.png": b"\x89PNG\r\n\x1a\n truncated",
        "broken.txt": b"caption of the broken one",
        "scan.bmp": b"BM not uploaded",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with open_page(browser) as page:
        page.goto(f"{studio['url']}/#/datasets/keepgood")
        page.get_by_test_id("file-input").set_input_files([str(tmp_path / n) for n in sorted(files)])
        summary = page.get_by_test_id("upload-summary")
        summary.wait_for()
        assert summary.inner_text() == "2 files stored, 3 refused (listed below)"
        page.get_by_test_id("stored-files").locator("summary").click()
        page.get_by_test_id("stored-files").locator(
            "li"
        ).first.wait_for()  # rendered once opened (under load: later)
        stored = page.get_by_test_id("stored-files").locator("li").all_inner_texts()
        assert stored == ["good.png", "good.txt"]
        refused = page.get_by_test_id("refused").locator("li").all_inner_texts()
        assert refused[0].startswith("scan.bmp BMP images are not accepted")
        assert (
            refused[1].startswith("broken.png ")
            and refused[2] == "broken.txt its image broken.png was refused"
        )
        page.get_by_test_id("thumb-grid").locator("figure.thumb").first.wait_for()
        expect(page.get_by_test_id("thumb-grid").locator("figure.thumb")).to_have_count(1)

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("delete-dataset").click()
        page.wait_for_url("**/#/datasets")
        page.get_by_role("button", name="Create").wait_for()
        expect(page.get_by_text("keepgood")).to_have_count(0)  # the list is fetched again after the delete
        assert not (Path(studio["home"]) / "datasets" / "keepgood").exists()
