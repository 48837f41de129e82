"""Train longer of a run whose dataset moved, in a real browser on a real server (RELIABILITY 832,
870): a multi-dataset run trained through the API, its second entry's folder moved on disk, then
the run page's Train longer: refused naming the entry, the input for it shown, the entry named
where it is now, and the run trains on to its new total on the moved folder."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from tests.e2e.ui_expect import expect
from tests.e2e.ui_pages import open_page

WIDE = {"width": 1280, "height": 900}
pytestmark = pytest.mark.slow  # two short runs on the tiny model (~40 s on the 2-core host)


def _wait_done(client: httpx.Client, run_id: str) -> dict:
    """The run record of `run_id` once it is no longer live (2 minutes at most)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run = client.get(f"/api/runs/{run_id}").json()
        if run["status"] not in ("queued", "preparing", "running", "stopping"):
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not end")


def _train_mix(url: str, model: Path, sample: Path) -> str:
    """Upload the sample dataset's images as two datasets (mix-a, mix-b) and train a 2-step run of
    both with a checkpoint a step; returns its id."""
    images = sorted(p for p in sample.iterdir() if p.is_file())
    with httpx.Client(base_url=url, timeout=60) as client:
        for name, half in (("mix-a", images[: len(images) // 2]), ("mix-b", images[len(images) // 2 :])):
            files = [("files", (p.name, p.read_bytes())) for p in half]
            assert client.post(f"/api/datasets/{name}/files", files=files).status_code == 201
        config = {
            "family": "flux",
            "base_model": str(model),
            "datasets": [{"path": "mix-a"}, {"path": "mix-b", "repeats": 2}],
            "resolution": 32,
            "steps": 2,
            "save_every": 1,
            "lora_rank": 4,
            "output_name": "e2e-moved-mix",
            "max_sequence_length": 16,
        }
        started = client.post("/api/train/start", json={"config": config})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        assert _wait_done(client, run_id)["status"] == "completed"
        return run_id


@pytest.mark.timeout(300)
def test_train_longer_names_a_moved_dataset_entry(studio, browser) -> None:
    url, home = str(studio["url"]), Path(studio["home"])
    run_id = _train_mix(url, Path(studio["model"]), Path(studio["sample"]))
    (home / "datasets" / "mix-b").rename(home / "datasets" / "mix-b-moved")  # put elsewhere by hand
    with open_page(browser, viewport=WIDE) as page:
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/#/runs/{run_id}")
        page.get_by_role("button", name="Train longer: e2e-moved-mix").click()
        steps = page.locator('[name="train_longer_steps"]')
        steps.fill("3")
        page.get_by_role("button", name="Train to 3 steps").click()
        entry = page.get_by_role("textbox", name="Dataset entry 2 (datasets.1.path) now at")
        entry.wait_for()
        assert "mix-b any more" in (page.locator(f"#{entry.get_attribute('aria-describedby')}").inner_text())
        expect(page.get_by_role("button", name="Train longer")).to_be_disabled()  # until it is named
        entry.fill("mix-b-moved")
        page.get_by_role("button", name="Train to 3 steps").click()
        page.wait_for_url(re.compile(r"#/live$"))
        assert errors == []
    with httpx.Client(base_url=url, timeout=60) as client:
        runs = client.get("/api/runs").json()["runs"]
        resumed = next(r for r in runs if r["output_name"] == "e2e-moved-mix" and r["id"] != run_id)
        done = _wait_done(client, resumed["id"])
        assert done["status"] == "completed", done
        assert done["steps_run"] == 3
        entries = done["config"]["datasets"]
        assert [(Path(e["path"]).name, e.get("repeats")) for e in entries] == [
            ("mix-a", None),
            ("mix-b-moved", 2),
        ]
