"""Issue 29 part 6 through HTTP (a real server and worker on the tiny FLUX.1): the preflight
states the hold-out (count, names) and refuses a split that leaves nothing to train and
validate_every without a split; a run's validation rounds reach the event stream, the status
snapshot, the run record and its LoRA list (best / last marked)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from api_helpers import LiveServer, read_events, upload_folder, wait_idle, wait_status
from PIL import Image


def test_preflight_refusals_and_a_validated_run_through_the_api(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict], tmp_path: Path
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    held, copies = tmp_path / "held", tmp_path / "copies"
    held.mkdir()
    copies.mkdir()
    for png in sorted(sample_dataset.glob("*.png"))[:2]:
        shutil.copy(png, copies / f"copy-{png.name}")  # the training images under other names
        (copies / f"copy-{png.stem}.txt").write_text("a copy")
        with Image.open(png) as img:  # other images than the training ones
            other = img.convert("RGB")
        other.putpixel((0, 0), (1, 2, 3))
        other.save(held / png.name)
        shutil.copy(png.with_suffix(".txt"), held / f"{png.stem}.txt")
    assert upload_folder(client, "held", held).status_code == 201
    assert upload_folder(client, "copies", copies).status_code == 201

    config = flux_config(output_name="val", validation_split=0.25, validate_every=2, save_lora_every=4)
    report = client.post("/api/train/preflight", json={"config": config})
    assert report.status_code == 200, report.text
    section = report.json()["dataset"]["validation"]
    assert section["held_out"] == 2 and section["train_images"] == 6 and section["every"] == 2
    assert len(section["images"]) == 2 and "seed 42" in section["source"]
    assert report.json()["dataset"]["images_used"] == 6 and report.json()["dataset"]["images_found"] == 8
    folder = client.post("/api/train/preflight", json={"config": {**config, "validation_split": "held"}})
    assert folder.json()["dataset"]["validation"]["images"] == sorted(p.name for p in held.glob("*.png"))
    copied = client.post("/api/train/preflight", json={"config": {**config, "validation_split": "copies"}})
    fields = [p["field"] for p in copied.json()["problems"]]
    assert copied.status_code == 400 and set(fields) == {"validation_split"}, copied.text
    assert "all 2 validation image(s) are training images too" in copied.text
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
    (only,) = client.get("/api/loras").json()["loras"][0]["files"]  # no EMA: one file, the measured one
    assert (only["weights"], only["step"], only["trained_steps"], only["last"]) == ("raw", None, 4, True)
    assert only["validation_loss"] == rounds[-1]["loss"] and only["best"] == (best == 4)


def test_an_ema_run_marks_the_measured_raw_file_and_serves_it(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    """With ema_decay the validation measures the raw weights: the LoRA lists label each file
    ema / raw, the loss and best / last go to the raw files (the final step's is
    <name>.raw.safetensors, never the EMA LoRA), and `step` downloads and generates with it."""
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    config = flux_config(output_name="vema", validation_split=0.25, validate_every=2, ema_decay=0.5)
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    rounds = [e for e in read_events(client, job_id) if e["type"] == "validation"]
    assert [r["step"] for r in rounds] == [2, 4]
    wait_status(client, job_id, {"completed"})
    wait_idle(client)

    loras = client.get(f"/api/runs/{job_id}/loras").json()["loras"]
    rows = [(lo["step"], lo["final"], lo["weights"], Path(lo["path"]).name) for lo in loras]
    assert rows == [
        (2, False, "raw", "vema-step-000002.safetensors"),
        (4, True, "raw", "vema.raw.safetensors"),
        (4, True, "ema", "vema.safetensors"),
    ]
    snap, raw, ema = loras
    assert (snap["validation_loss"], raw["validation_loss"]) == (rounds[0]["loss"], rounds[1]["loss"])
    assert raw["last"] and ema["validation_loss"] is None and not (ema["best"] or ema["last"])
    best = next(lo for lo in loras if lo["best"])
    assert best["step"] == rounds[-1]["best_step"] and best["weights"] == "raw"
    sidecar_best = client.get("/api/loras").json()["loras"][0]["sidecar"]["validation"]["best"]["lora"]
    assert Path(best["path"]).as_posix().endswith(sidecar_best)  # the sidecar names the same file

    (listed,) = client.get("/api/loras", params={"family": "flux"}).json()["loras"]
    assert (listed["name"], listed["weights"], listed["raw_step"]) == ("vema", "ema", 4)
    # the list the Generate screen picks from offers both final files, each labelled and marked
    ema_file, raw_file = listed["files"]
    assert (ema_file["weights"], ema_file["step"], ema_file["trained_steps"]) == ("ema", None, 4)
    assert ema_file["validation_loss"] is None and not (ema_file["best"] or ema_file["last"])
    assert (raw_file["weights"], raw_file["step"], raw_file["url"]) == ("raw", 4, raw["url"])
    assert (raw_file["validation_loss"], raw_file["best"], raw_file["last"]) == (
        raw["validation_loss"], raw["best"], True
    )  # fmt: skip
    assert raw_file["bytes"] == Path(raw["path"]).stat().st_size and ema_file["url"] == ema["url"]
    assert raw["url"] == "/api/loras/vema/file?step=4" and ema["url"] == "/api/loras/vema/file"
    got_raw, got_ema = client.get(raw["url"]), client.get(ema["url"])
    assert got_raw.status_code == 200 and got_raw.content == Path(raw["path"]).read_bytes()
    assert got_ema.content == Path(ema["path"]).read_bytes() != got_raw.content

    body = {"family": "flux", "base_model": str(config["base_model"]), "prompt": "a red circle",
            "seed": 3, "steps": 2, "width": 32, "height": 32}  # fmt: skip
    images = {}
    for label, choice in (("raw", {"name": "vema", "step": 4}), ("ema", {"name": "vema"})):
        made = client.post("/api/generate", json={**body, "loras": [choice]})
        assert made.status_code == 201, made.text
        images[label] = client.get(made.json()["url"]).content
    assert images["raw"] != images["ema"]  # the raw weights were applied, not the EMA ones
