"""Issue 27 in a real browser on a real server (tiny FLUX.2 klein): targets and their control
images are uploaded as pairs (Upload as: control images), the dataset shows each target beside
its control; a run trains on the pairs with a sample prompt naming a reference (the run's
samples list it); the Generate screen takes an uploaded reference image and the gallery keeps it."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import _require_ui, _running_studio
from tests.e2e.ui_pages import open_page

from live_server import WORKER_TIMEOUT_S

# browser test of one screen (test_ui_flow and test_ui_runs stay in the default suite)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def klein_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A running server with the tiny FLUX.2 klein model under models/ and the paired sample set."""
    _require_ui()
    from lorastudio.tiny import save_tiny_model
    from lorastudio.tiny.paired import make_paired_dataset

    home = tmp_path_factory.mktemp("home-pairs")
    model = save_tiny_model("flux2-klein", home / "models" / "tiny-klein")
    pairs = make_paired_dataset(tmp_path_factory.mktemp("upload-pairs") / "pairs")
    with _running_studio(home, {}) as url:
        yield {"url": url, "home": home, "model": model, "pairs": pairs}


@pytest.mark.timeout(300)
def test_pairs_upload_train_and_generate_with_a_reference(klein_studio, browser, shoot) -> None:
    url, pairs, model = klein_studio["url"], Path(klein_studio["pairs"]), klein_studio["model"]
    stems = ["shape_00", "shape_01", "shape_02", "shape_03"]
    with open_page(browser) as page:
        # 1. targets and captions, then their controls into slot 1
        page.goto(f"{url}/#/datasets/edits")
        targets = [str(pairs / f"{s}.{e}") for s in stems for e in ("png", "txt")]
        page.get_by_test_id("file-input").set_input_files(targets)
        page.get_by_test_id("upload-status").get_by_text("Upload finished").wait_for()
        page.get_by_label("upload as").select_option("control")
        page.get_by_test_id("file-input").set_input_files(
            [str(pairs / "control" / f"{s}.png") for s in stems]
        )
        page.get_by_test_id("upload-summary").get_by_text("4 files stored").wait_for()
        card = page.get_by_test_id("controls-of-shape_00.png")
        card.wait_for()
        page.wait_for_function(
            "() => { const i = document.querySelector('[data-testid=\"controls-of-shape_00.png\"] img');"
            " return i && i.complete && i.naturalWidth > 0; }"
        )
        shoot(page, "dataset-pairs")

        # 2. a short run on the pairs (through the API), its sample naming a reference
        config = {
            "family": "flux2-klein", "base_model": str(model), "data_dir": "edits", "resolution": 64,
            "steps": 2, "batch_size": 2, "max_sequence_length": 16, "output_name": "pairs-lora",
            "sample_prompts": [{"prompt": "invert the colours", "controls": ["control/shape_01.png"]}],
            "sample_steps": 1,
        }  # fmt: skip
        started = page.request.post(f"{url}/api/train/start", data={"config": config})
        assert started.status == 201, started.text()
        deadline = time.monotonic() + 200
        while True:
            job = page.request.get(f"{url}/api/train/status").json()["job"]
            if job and job["status"] in ("completed", "failed"):
                break
            assert time.monotonic() < deadline, job
            time.sleep(1)
        assert job["status"] == "completed", job
        samples = page.request.get(f"{url}/api/runs/{job['id']}/samples").json()["samples"]
        assert samples and samples[-1]["references"] == [f"/api/runs/{job['id']}/samples/ref-0-0.png"]

        # 3. generate with the LoRA and an uploaded reference; the gallery keeps it
        page.goto(f"{url}/#/generate")
        page.get_by_test_id("reference-images").wait_for()
        page.get_by_label("use LoRA pairs-lora").check()
        for name, value in (("gen_steps", "1"), ("gen_width", "64"), ("gen_height", "64")):
            page.locator(f'[name="{name}"]').fill(value)
        page.locator('[name="prompt"]').fill("invert the colours, e2e")
        page.get_by_test_id("reference-input").set_input_files(str(pairs / "control" / "shape_05.png"))
        page.get_by_test_id("reference-images").get_by_alt_text("reference 1").wait_for()
        page.get_by_role("button", name="Generate", exact=True).click()
        page.wait_for_function(
            "() => { const i = document.querySelector('[data-testid=result-image]');"
            " return i && i.complete && i.naturalWidth === 64; }",
            timeout=WORKER_TIMEOUT_S * 1000,
        )
        item = page.get_by_test_id("gallery").get_by_role(
            "button", name=re.compile("invert the colours, e2e")
        )
        item.get_by_alt_text("reference 1").wait_for()
        shoot(page, "generate-reference")
        kept = page.request.get(f"{url}/api/gallery").json()["images"][0]
        assert len(kept["references"]) == 1 and kept["reference_urls"][0].startswith("/gallery/references/")
