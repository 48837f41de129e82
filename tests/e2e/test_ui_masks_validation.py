"""Issue 29 parts 4 and 6 in a real browser on a real server: the dataset page lays each loss mask
(masks/ folder, or the image's alpha channel) over its image when "Show masks" is ticked; a run with a validation split charts its validation
loss beside the training loss (Live and the run page) and marks the best and last LoRA."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from PIL import Image
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page
from tests.e2e.ui_uploads import api_json

# browser test of one screen (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow

THREE_POINTS = re.compile(r"^[^L]*L[^L]*L[^L]*$")  # an SVG path of 3 points: M, then 2 L


@pytest.mark.timeout(240)
def test_mask_overlay_and_the_validation_chart(studio, browser, artifacts: Path, shoot) -> None:
    url, home = str(studio["url"]), Path(studio["home"])
    data = home / "datasets" / "masked"
    (data / "masks").mkdir(parents=True)
    for path in sorted(Path(studio["sample"]).iterdir()):
        shutil.copy(path, data / path.name)
    first = sorted(data.glob("*.png"))[0]
    with Image.open(first) as img:
        mask = Image.new("L", img.size, 0)
        mask.paste(255, (0, 0, img.width // 2, img.height))  # the left half trained
    mask.save(data / "masks" / first.name)

    with open_page(browser) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"{url}/#/datasets/masked")
            page.get_by_test_id("dataset-counts").get_by_text("1 masked").wait_for()
            overlay = page.get_by_alt_text(f"mask of {first.name}")
            assert overlay.count() == 0
            page.get_by_test_id("mask-toggle").get_by_role("checkbox").check()
            overlay.wait_for()
            page.wait_for_function(
                "img => img.complete && img.naturalWidth > 0", arg=overlay.element_handle()
            )
            shoot(page, "dataset-masks")

            cutouts = home / "datasets" / "cutouts"  # alpha_mask's masks: each image's alpha channel
            cutouts.mkdir()
            cut = Image.new("RGBA", (64, 64), (200, 40, 40, 255))
            cut.paste((0, 0, 0, 0), (0, 0, 32, 64))
            cut.save(cutouts / "cut.png")
            page.goto(f"{url}/#/datasets/cutouts")
            page.get_by_test_id("dataset-counts").get_by_text("1 with alpha").wait_for()
            page.get_by_test_id("mask-toggle").get_by_role("checkbox").check()
            alpha = page.get_by_alt_text("alpha of cut.png")
            alpha.wait_for()
            page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=alpha.element_handle())

            config = {
                "family": "flux",
                "base_model": str(studio["model"]),
                "data_dir": "masked",
                "resolution": 32,
                "steps": 3,
                "max_sequence_length": 16,
                "output_name": "validated",
                "validation_split": 0.25,
                "validate_every": 1,
                "unmasked_weight": 0.1,
            }
            job = api_json(url, "/api/train/start", {"config": config})
            deadline = time.monotonic() + 180
            while (api_json(url, "/api/train/status")["job"] or {}).get("status") not in (
                "completed",
                "failed",
            ):
                assert time.monotonic() < deadline, "the run did not finish"
                time.sleep(0.5)
            assert api_json(url, "/api/train/status")["job"]["status"] == "completed"

            page.goto(f"{url}/#/live")
            page.get_by_test_id("stat-val-loss").wait_for()
            expect(page.locator('path[data-series="val loss"]')).to_have_attribute(
                "d", THREE_POINTS
            )  # 3 rounds
            page.goto(f"{url}/#/runs/{job['id']}")
            page.get_by_test_id("lora-best").wait_for()
            expect(page.get_by_test_id("lora-last")).to_have_count(1)
            expect(page.locator('path[data-series="val loss"]')).to_have_attribute("d", THREE_POINTS)
            shoot(page, "run-validation")
            assert errors == []
        except Exception:
            page.screenshot(path=artifacts / "masks-validation-failure.png", full_page=True)
            raise
