"""The whole studio in a real browser: upload a dataset, train, watch the chart, stop and save,
find the run, generate with its LoRA. Screenshots at 1280 and 420 px go to tests/e2e/artifacts/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

WIDE = {"width": 1280, "height": 900}
NARROW = {"width": 420, "height": 860}
STOP_BUTTONS = ("Continue", "Stop and save", "Stop and discard")


def _assert_inside_viewport(page, names: tuple[str, ...]) -> None:
    size = page.viewport_size
    for name in names:
        button = page.get_by_role("dialog").get_by_role("button", name=name, exact=True)
        assert button.is_visible(), f"{name!r} is not visible at {size['width']} px"
        box = button.bounding_box()
        assert box is not None
        assert box["x"] >= 0 and box["y"] >= 0, f"{name!r} starts outside the viewport: {box}"
        assert box["x"] + box["width"] <= size["width"], f"{name!r} is clipped on the right: {box}"
        assert box["y"] + box["height"] <= size["height"], f"{name!r} is clipped at the bottom: {box}"


def _chart_points(page) -> int:
    return int(page.get_by_test_id("chart").get_attribute("data-points") or 0)


@pytest.mark.timeout(240)
def test_upload_train_stop_generate(studio, browser, artifacts: Path) -> None:
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    try:
        _flow(page, studio, artifacts)
    except Exception:
        page.screenshot(path=artifacts / "failure.png", full_page=True)
        raise
    finally:
        context.close()


def _flow(page, studio, artifacts: Path) -> None:
    url, model, sample = studio["url"], studio["model"], studio["sample"]
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # 1. Datasets: create one by uploading the sample files (images + .txt captions)
    page.goto(f"{url}/#/datasets")
    page.get_by_label("new dataset name").fill("shapes")
    page.get_by_role("button", name="Create").click()
    files = sorted(str(p) for p in Path(sample).iterdir())
    images = [f for f in files if f.endswith(".png")]
    page.get_by_test_id("file-input").set_input_files(files)
    page.get_by_test_id("upload-status").get_by_text("Upload finished").wait_for()
    thumbs = page.get_by_test_id("thumb-grid").locator("figure.thumb")
    thumbs.nth(len(images) - 1).wait_for()
    assert thumbs.count() == len(images)
    assert (
        page.get_by_test_id("dataset-counts").inner_text()
        == f"{len(images)} images · {len(images)} captioned"
    )
    page.wait_for_function(
        "[...document.querySelectorAll('.thumb img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    # captions are editable in place
    first = thumbs.first.locator("textarea")
    first.fill("a test caption")
    first.blur()
    thumbs.first.get_by_text("saved").wait_for()
    page.screenshot(path=artifacts / "datasets-1280.png", full_page=True)

    # 2. Train: pick the dataset, the tiny model, tiny settings; Check, then Start
    page.goto(f"{url}/#/train/shapes")
    page.locator('[name="base_model"]').fill(str(model))
    page.locator('[name="resolution"]').fill("32")
    page.locator('[name="length"]').fill("3000")
    page.locator('[name="output_name"]').fill("e2e-lora")
    page.get_by_role("button", name="Check").click()
    report = page.get_by_test_id("preflight")
    report.wait_for()
    assert re.search(rf"images used\s*{len(images)} / {len(images)}", report.inner_text(), re.IGNORECASE)
    page.screenshot(path=artifacts / "train-1280.png", full_page=True)
    page.get_by_role("button", name="Start training").click()

    # 3. Live: the chart gains points from the event stream
    page.wait_for_url(re.compile(r"#/live$"))
    page.wait_for_function(
        "() => Number(document.querySelector('[data-testid=chart]')?.dataset.points || 0) >= 3",
        timeout=90_000,
    )
    seen = _chart_points(page)
    page.wait_for_function(
        f"() => Number(document.querySelector('[data-testid=chart]')?.dataset.points || 0) > {seen}"
    )
    page.screenshot(path=artifacts / "live-1280.png", full_page=True)

    # 4. Stop dialog: three buttons inside the viewport at 1280 and 420 px
    page.get_by_role("button", name="Stop", exact=True).click()
    _assert_inside_viewport(page, STOP_BUTTONS)
    page.screenshot(path=artifacts / "stop-dialog-1280.png")
    page.set_viewport_size(NARROW)
    _assert_inside_viewport(page, STOP_BUTTONS)
    page.screenshot(path=artifacts / "stop-dialog-420.png")
    page.screenshot(path=artifacts / "live-420.png", full_page=True)
    page.get_by_role("button", name="Stop and save").click()
    page.locator("h1 .status-stopped").wait_for(timeout=60_000)
    page.get_by_text("LoRA saved").wait_for()
    page.set_viewport_size(WIDE)

    # 5. Runs: the run is in the history; open it to see its chart and config
    page.goto(f"{url}/#/runs")
    row = page.get_by_test_id("runs-table").locator("tr", has_text="e2e-lora")
    row.wait_for()
    assert row.locator(".status-stopped").is_visible()
    row.get_by_role("link", name="e2e-lora").click()
    page.get_by_role("heading", name="Outputs").wait_for()
    assert page.locator("ul.plain").inner_text().count(".safetensors") == 1
    assert _chart_points(page) >= 3
    page.screenshot(path=artifacts / "run-1280.png", full_page=True)

    # 6. Generate with the LoRA and see the image
    page.goto(f"{url}/#/generate")
    page.locator('[name="gen_base_model"]').fill(str(model))
    page.get_by_label("use LoRA e2e-lora").check()
    for name, value in (("gen_steps", "2"), ("gen_width", "32"), ("gen_height", "32")):
        page.locator(f'[name="{name}"]').fill(value)
    page.get_by_role("button", name="Generate", exact=True).click()
    image = page.get_by_test_id("result-image")
    image.wait_for(timeout=60_000)
    page.wait_for_function(
        "() => { const i = document.querySelector('[data-testid=result-image]'); return i && i.complete && i.naturalWidth === 32; }"
    )
    page.screenshot(path=artifacts / "generate-1280.png", full_page=True)
    page.set_viewport_size(NARROW)
    page.screenshot(path=artifacts / "generate-420.png", full_page=True)
    page.goto(f"{url}/#/train")
    page.locator('[name="lora_rank"]').wait_for()
    page.screenshot(path=artifacts / "train-420.png", full_page=True)

    assert errors == [], f"JavaScript errors in the page: {errors}"
