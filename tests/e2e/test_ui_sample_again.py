"""A sample preview's "Generate again" in a real browser on a real server: a tiny run with a
sample prompt, its run page's preview of step 1 (the raw weights its snapshot keeps), Generate
again, Generate, and the gallery image is the preview's pixels (fix 696's parity, on the CPU)."""

from __future__ import annotations

import io
import re
import shutil
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tests.e2e.ui_pages import open_page
from tests.e2e.ui_uploads import api_json

from live_server import WORKER_TIMEOUT_S

# browser test of one flow (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow

PROMPT = "a green triangle, again"


def _pixels(url: str) -> np.ndarray:
    """The PNG served at `url` as an int16 array (H, W, 3)."""
    with urllib.request.urlopen(url, timeout=30) as res:
        return np.asarray(Image.open(io.BytesIO(res.read())).convert("RGB"), dtype=np.int16)


@pytest.mark.timeout(300)
def test_generate_again_renders_the_previews_pixels(studio, browser, artifacts: Path, shoot) -> None:
    url, home = str(studio["url"]), Path(studio["home"])
    shutil.copytree(Path(studio["sample"]), home / "datasets" / "shapes")
    config = {
        "family": "flux", "base_model": str(studio["model"]), "data_dir": "shapes", "resolution": 32,
        "steps": 2, "output_name": "again", "sample_prompts": [{"prompt": PROMPT, "seed": 7}],
        "sample_every": 1, "sample_steps": 2, "save_lora_every": 1,
    }  # fmt: skip
    run_id = api_json(url, "/api/train/start", {"config": config})["id"]
    deadline = time.monotonic() + 240
    while (api_json(url, "/api/train/status")["job"] or {}).get("status") not in ("completed", "failed"):
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.5)
    assert api_json(url, "/api/train/status")["job"]["status"] == "completed"
    listed = {s["step"]: s for s in api_json(url, f"/api/runs/{run_id}/samples")["samples"]}
    assert listed[1]["lora"] == {"name": "again", "step": 1, "weights": None} and listed[1]["note"] is None, (
        listed[1]
    )

    with open_page(browser) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"{url}/#/runs/{run_id}")
            preview = page.get_by_test_id("samples-step-1")
            preview.get_by_role("link", name=re.compile("Generate again")).click()
            page.get_by_test_id("again-from").wait_for()
            assert "Generate renders it again" in page.get_by_test_id("again-from").inner_text()
            assert page.locator('[name="prompt"]').input_value() == PROMPT
            assert page.locator('[name="gen_seed"]').input_value() == "7"
            assert page.get_by_label("use LoRA again (raw, step 1)").is_checked()
            shoot(page, "generate-again")
            page.get_by_role("button", name="Generate", exact=True).click()
            page.get_by_test_id("result-image").wait_for(timeout=WORKER_TIMEOUT_S * 1000)
            item = page.get_by_test_id("gallery").get_by_role("button", name=re.compile(re.escape(PROMPT)))
            assert "again @1 ×1.00" in item.inner_text()
            assert errors == []
        except Exception:
            page.screenshot(path=artifacts / "generate-again-failure.png", full_page=True)
            raise
    images = [i for i in api_json(url, "/api/gallery")["images"] if i["prompt"] == PROMPT]
    assert len(images) == 1 and images[0]["seed"] == 7, images
    generated = _pixels(f"{url}{images[0]['url']}")
    shown = _pixels(f"{url}{listed[1]['url']}")
    assert generated.shape == shown.shape, (generated.shape, shown.shape)
    np.testing.assert_array_equal(generated, shown)
