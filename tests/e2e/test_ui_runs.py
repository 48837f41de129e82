"""Run management, Generate-with-a-run and the Models screen in a real browser on a real server
(issue 30): a run trained through the API, then its page (worker log, config downloads), Clone
(the Train form prefilled), each screen shot at 1280 and 420 px (no sideways scrolling)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page

WIDE = {"width": 1280, "height": 900}


def _train(url: str, model: Path, sample: Path) -> str:
    """Upload the sample dataset and train a 4-step run with sample previews; returns its id."""
    with httpx.Client(base_url=url, timeout=60) as client:
        files = [("files", (p.name, p.read_bytes())) for p in sorted(sample.iterdir()) if p.is_file()]
        assert client.post("/api/datasets/shapes/files", files=files).status_code == 201
        config = {
            "family": "flux",
            "base_model": str(model),
            "data_dir": "shapes",
            "resolution": 32,
            "steps": 4,
            "lora_rank": 4,
            "output_name": "e2e-runs",
            "sample_prompts": ["a red circle", "a blue square"],
            "sample_every": 2,
            "sample_steps": 1,
            "max_sequence_length": 16,
        }
        started = client.post("/api/train/start", json={"config": config})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            job = client.get("/api/train/status").json()["job"]  # None: still queued for the dispatcher
            if job is not None and job["status"] not in ("queued", "preparing", "running", "stopping"):
                assert job["status"] == "completed", job
                return run_id
            time.sleep(0.2)
    raise AssertionError("the run did not finish")


@pytest.mark.timeout(240)
def test_run_page_log_config_and_clone(studio, browser, artifacts: Path, shoot) -> None:
    url = str(studio["url"])
    run_id = _train(url, Path(studio["model"]), Path(studio["sample"]))
    with open_page(browser, viewport=WIDE, accept_downloads=True) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            page.goto(f"{url}/#/runs/{run_id}")
            log = page.get_by_label("run log")
            log.wait_for()
            assert "lorastudio.worker: complete:" in log.inner_text()
            with page.expect_download() as download:
                page.get_by_role("link", name="download the config as TOML").click()
            assert download.value.suggested_filename == "e2e-runs.toml"
            assert 'family = "flux"' in Path(download.value.path()).read_text(encoding="utf-8")
            shoot(page, "run-detail")

            page.get_by_role("link", name="Clone").click()
            page.wait_for_url(re.compile(rf"#/clone/{run_id}$"))
            page.get_by_test_id("clone-note").wait_for()
            assert page.locator('[name="lora_rank"]').input_value() == "4"
            assert page.locator('[name="length"]').input_value() == "4"
            assert page.locator('[name="output_name"]').input_value() == ""
            shoot(page, "train-clone")

            # Live: the finished run's sample rounds (steps 2 and 4) side by side; its LoRA banner in view
            page.goto(f"{url}/#/live")
            history = page.get_by_test_id("sample-history")
            history.wait_for()
            assert history.get_by_role("columnheader").all_inner_texts()[1:] == ["step 2", "step 4"]
            expect(page.get_by_test_id("lora-saved")).to_be_visible()
            shoot(page, "live-history")

            # Generate with it: the run's family, base model and LoRA; FLUX.1 takes no negative prompt
            page.goto(f"{url}/#/runs/{run_id}")
            page.get_by_role("link", name="Generate with it").click()
            page.wait_for_url(re.compile(rf"#/generate/{run_id}$"))
            page.get_by_label("use LoRA e2e-runs").wait_for()
            expect(page.get_by_label("use LoRA e2e-runs")).to_be_checked()
            assert (
                page.get_by_role("radio", name="FLUX.1", exact=True).get_attribute("aria-checked") == "true"
            )
            expect(page.get_by_text("Guidance (distilled)")).to_be_visible()
            expect(page.locator('[name="negative_prompt"]')).to_have_count(0)
            shoot(page, "generate-from-run")
            assert errors == []
        except Exception:
            page.screenshot(path=artifacts / "runs-failure.png", full_page=True)
            raise


@pytest.mark.timeout(180)
def test_models_screen_lists_adds_and_forgets(
    studio, browser, artifacts: Path, shoot, tmp_path: Path
) -> None:
    from lorastudio.tiny import save_tiny_model

    url = str(studio["url"])
    folder = save_tiny_model("sdxl", tmp_path / "my-sdxl")
    with open_page(browser, viewport=WIDE) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            # the Train screen sends a family without a model to the Models screen
            page.goto(f"{url}/#/train")
            page.get_by_role("radio", name="Stable Diffusion XL").click()
            page.get_by_role("link", name="Fetch or add a sdxl model on the Models screen").click()
            page.wait_for_url(re.compile(r"#/models$"))
            table = page.get_by_test_id("models-table")
            table.get_by_text("tiny-flux").wait_for()
            page.locator('[name="model_folder"]').fill(str(folder))
            page.get_by_role("button", name="Add folder").click()
            row = table.locator("tr", has_text="my-sdxl")
            row.wait_for()
            assert "added folder" in row.inner_text() and "trainable" in row.inner_text().lower()
            shoot(page, "models")
            page.once("dialog", lambda dialog: dialog.accept())
            row.get_by_role("button", name="Forget my-sdxl").click()
            row.wait_for(state="detached")
            assert folder.is_dir()  # forgetting leaves the files
            page.locator('[name="repo_id"]').fill("not a hub id")
            page.get_by_role("button", name="Fetch", exact=True).click()  # not a captioner row's "Fetch REPO"
            assert "not a hub model id" in page.get_by_role("alert").inner_text()
            assert errors == []
        except Exception:
            page.screenshot(path=artifacts / "models-failure.png", full_page=True)
            raise
