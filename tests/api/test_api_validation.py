"""Issue 29 part 6 through HTTP (a real server and worker on the tiny FLUX.1): the preflight
states the hold-out (count, names) and refuses a split that leaves nothing to train and
validate_every without a split; a run's validation rounds reach the event stream, the status
snapshot, the run record and its LoRA list (best / last marked)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from api_helpers import LiveServer, read_events, upload_folder, wait_idle, wait_status


def test_preflight_refusals_and_a_validated_run_through_the_api(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict], tmp_path: Path
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    held = tmp_path / "held"
    held.mkdir()
    for png in sorted(sample_dataset.glob("*.png"))[:2]:
        shutil.copy(png, held / png.name)
        shutil.copy(png.with_suffix(".txt"), held / f"{png.stem}.txt")
    assert upload_folder(client, "held", held).status_code == 201

    config = flux_config(output_name="val", validation_split=0.25, validate_every=2, save_lora_every=4)
    report = client.post("/api/train/preflight", json={"config": config})
    assert report.status_code == 200, report.text
    section = report.json()["dataset"]["validation"]
    assert section["held_out"] == 2 and section["train_images"] == 6 and section["every"] == 2
    assert len(section["images"]) == 2 and "seed 42" in section["source"]
    assert report.json()["dataset"]["images_used"] == 6 and report.json()["dataset"]["images_found"] == 8
    folder = client.post("/api/train/preflight", json={"config": {**config, "validation_split": "held"}})
    assert folder.json()["dataset"]["validation"]["images"] == sorted(p.name for p in held.glob("*.png"))
    for bad, field in (
        ({"validation_split": 0.95}, "validation_split"),
        ({"validation_split": "shapes"}, "validation_split"),
        ({"validation_split": None}, "validate_every"),
    ):
        refused = client.post("/api/train/preflight", json={"config": {**config, **bad}})
        assert refused.status_code == 400, refused.text
        assert field in {p["field"] for p in refused.json()["problems"]}, refused.text

    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    events = read_events(client, job_id)
    rounds = [e for e in events if e["type"] == "validation"]
    assert [r["step"] for r in rounds] == [2, 4] and all(r["images"] == 2 for r in rounds)
    job = wait_status(client, job_id, {"completed"})
    series = [{"step": r["step"], "loss": r["loss"]} for r in rounds]
    assert job["validation"] == series
    wait_idle(client)
    run = client.get(f"/api/runs/{job_id}").json()
    assert run["validation"] == series
    loras = client.get(f"/api/runs/{job_id}/loras").json()["loras"]
    by_step = {(lo["step"], lo["final"]): lo for lo in loras}
    assert by_step[(2, False)]["validation_loss"] == rounds[0]["loss"]
    assert by_step[(4, True)]["last"] and not by_step[(2, False)]["last"]
    best = rounds[-1]["best_step"]
    assert [lo["step"] for lo in loras if lo["best"]] == [best]
