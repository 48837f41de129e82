"""The Generate screen's LoRA picker in a real browser on a real server: a run with EMA and a
validation split offers both its files (the EMA LoRA and <name>.raw.safetensors, the one
validation measured), each labelled with its weights and validation marks; the raw one generates
with its step, and the gallery says which file made the image."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from tests.e2e.ui_pages import open_page
from tests.e2e.ui_uploads import api_json

from live_server import WORKER_TIMEOUT_S

# browser test of one screen (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow


@pytest.mark.timeout(240)
def test_the_raw_file_of_an_ema_run_is_pickable_and_generates(
    studio, browser, artifacts: Path, shoot
) -> None:
    url, home = str(studio["url"]), Path(studio["home"])
    shutil.copytree(Path(studio["sample"]), home / "datasets" / "shapes")
    config = {
        "family": "flux", "base_model": str(studio["model"]), "data_dir": "shapes", "resolution": 32,
        "steps": 2, "max_sequence_length": 16, "output_name": "smooth", "validation_split": 0.25,
        "validate_every": 1, "ema_decay": 0.5,
    }  # fmt: skip
    api_json(url, "/api/train/start", {"config": config})
    deadline = time.monotonic() + 180
    while (api_json(url, "/api/train/status")["job"] or {}).get("status") not in ("completed", "failed"):
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.5)
    assert api_json(url, "/api/train/status")["job"]["status"] == "completed"

    with open_page(browser) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"{url}/#/generate")
            raw = page.get_by_label("use LoRA smooth (raw, step 2)")
            raw.wait_for()
            ema_row = page.locator("li", has=page.get_by_label("use LoRA smooth", exact=True))
            raw_row = page.locator("li", has=raw)
            assert "EMA" in ema_row.inner_text() and "val" not in ema_row.inner_text()
            text = raw_row.inner_text()
            assert "raw" in text and re.search(r"val \d", text) and "last" in text, text
            raw.check()
            for name, value in (("gen_steps", "2"), ("gen_width", "32"), ("gen_height", "32")):
                page.locator(f'[name="{name}"]').fill(value)
            page.locator('[name="prompt"]').fill("a raw circle")
            page.get_by_role("button", name="Generate", exact=True).click()
            page.get_by_test_id("result-image").wait_for(timeout=WORKER_TIMEOUT_S * 1000)
            item = page.get_by_test_id("gallery").get_by_role("button", name=re.compile("a raw circle"))
            assert "smooth @2 ×1.00" in item.inner_text()
            shoot(page, "generate-ema-raw")
            assert errors == []
        except Exception:
            page.screenshot(path=artifacts / "ema-picker-failure.png", full_page=True)
            raise
