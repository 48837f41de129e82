"""Resume through HTTP on a real server with real workers (tiny FLUX.1): a run stopped with save
keeps a LoRA of the steps it ran and is resumable, its resume continues in the same folder to the
original total steps and gives the LoRA of an uninterrupted run; a resume that would change the
maths is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from api_helpers import FINAL, LiveServer, upload_folder, wait_idle, wait_status
from safetensors.torch import load_file

from lorastudio.config import parse_train_config
from lorastudio.training.loop import train

STEPS = 30


def _stopped_run(server: LiveServer, config: dict, image: str) -> dict:
    """Start `config`, stop it with save once it has run 3 steps; returns the final job. While it
    runs, the GPU is the job's (a generation is refused) and so is its dataset (a caption edit of
    `image` is refused)."""
    client = server.client
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    deadline = time.monotonic() + 90
    # a job just accepted may still be in the status's queue, not yet its "job" (the dispatcher's turn)
    while ((client.get("/api/train/status").json()["job"] or {}).get("progress") or {}).get("step", 0) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    generate = {
        "family": "flux",
        "base_model": config["base_model"],
        "prompt": "x",
        "width": 32,
        "height": 32,
    }
    assert client.post("/api/generate", json=generate).status_code == 409  # the GPU is training's
    caption = client.put(f"/api/datasets/shapes/captions/{image}", json={"caption": "x"})
    assert caption.status_code == 409  # the dataset is in use
    stopping = client.post("/api/train/stop", json={"save": True})
    assert stopping.status_code == 200 and stopping.json()["status"] == "stopping"
    job = wait_status(client, job_id, FINAL)
    wait_idle(client)
    return job


def test_resume_a_stopped_run_to_the_uninterrupted_result(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    outputs = Path(client.get("/api/info").json()["outputs_root"])
    config = flux_config(
        output_name="res",
        steps=STEPS,
        save_every=2,
        keep_last=2,
        seed=5,
        validation_split=0.25,
        validate_every=2,
    )
    first = _stopped_run(server, config, image=sorted(sample_dataset.glob("*.png"))[0].name)
    stopped_at = first["steps_run"]
    assert first["status"] == "stopped" and 3 <= stopped_at < STEPS
    # the stop with save kept a LoRA of the steps run, and its sidecar says so
    assert first["lora_path"] == str(outputs / "res" / "res.safetensors")
    assert Path(first["lora_path"]).is_file()
    sidecar = json.loads((outputs / "res" / "res.json").read_text())
    assert sidecar["stopped"] is True and sidecar["steps"] == stopped_at

    listed = next(r for r in client.get("/api/runs").json()["runs"] if r["id"] == first["id"])
    assert listed["resume_step"] == stopped_at
    assert listed["train_longer"] == {"from_step": stopped_at, "steps": STEPS}  # from the stop's checkpoint
    checkpoints = client.get(f"/api/runs/{first['id']}/checkpoints").json()
    assert checkpoints["resume_step"] == stopped_at
    assert checkpoints["checkpoints"][-1]["name"] == f"step-{stopped_at:06d}"

    # refused: a setting that changes the maths, an unknown checkpoint or run, a bad name
    refused = client.post(f"/api/runs/{first['id']}/resume", json={"settings": {"learning_rate": 0.5}})
    assert refused.status_code == 400 and refused.json()["problems"][0]["field"] == "learning_rate"
    assert "changes the maths" in refused.json()["problems"][0]["message"]
    typo = client.post(f"/api/runs/{first['id']}/resume", json={"settings": {"keep_lats": 1, "zzz": 2}})
    assert typo.status_code == 400  # a misspelt setting is named as unknown, not as maths-changing
    messages = {p["field"]: p["message"] for p in typo.json()["problems"]}
    assert messages["keep_lats"].startswith("unknown setting: did you mean keep_last"), messages
    assert messages["zzz"].startswith("unknown setting: settings that may change: "), messages
    missing = client.post(f"/api/runs/{first['id']}/resume", json={"checkpoint": "step-999999"})
    assert missing.status_code == 404
    assert client.post("/api/runs/nope/resume", json={}).status_code == 404
    assert client.post(f"/api/runs/{first['id']}/resume", json={"checkpoint": "../x"}).status_code == 422

    resumed = client.post(f"/api/runs/{first['id']}/resume", json={"settings": {"keep_last": 1}})
    assert resumed.status_code == 201, resumed.text
    job = resumed.json()
    assert job["id"] != first["id"] and job["output_name"] == "res" and job["steps_run"] == stopped_at
    assert [p["step"] for p in job["metrics"]] == list(range(1, stopped_at + 1))  # history carried over
    assert [v["step"] for v in job["validation"]] == list(range(2, stopped_at + 1, 2))  # its rounds too
    again = client.post(f"/api/runs/{first['id']}/resume", json={})
    assert again.status_code == 409  # the folder is in use by the queued/running resume
    done = wait_status(client, job["id"], FINAL)
    wait_idle(client)
    assert done["status"] == "completed" and done["steps_run"] == STEPS, done["error"]
    assert [p["step"] for p in done["metrics"]] == list(range(1, STEPS + 1))
    on_disk = json.loads((outputs / "res" / "validation.json").read_text())["series"]
    assert [(v["step"], v["loss"]) for v in done["validation"]] == [(v["step"], v["loss"]) for v in on_disk]
    assert [v["step"] for v in on_disk] == list(range(2, STEPS + 1, 2))
    assert Path(done["lora_path"]) == outputs / "res" / "res.safetensors"
    assert len(list((outputs / "res" / "checkpoints").iterdir())) == 1  # keep_last=1 on resume
    assert all(r["resume_step"] is None for r in client.get("/api/runs").json()["runs"])

    # the same run uninterrupted, in this process, gives the same LoRA
    reference = parse_train_config({**config, "data_dir": str(outputs.parent / "datasets" / "shapes")})
    events: list = []
    result = train(reference.model_copy(update={"output_name": "ref"}), events.append, device="cpu")
    expected, got = load_file(str(result.lora_path)), load_file(done["lora_path"])
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    # and so does the curve the API shows: each step's loss, average, lr and grad norm, each round
    # (session 36 resume audit: the carried history was compared by its steps only)
    keys = ("step", "epoch", "loss", "avg_loss", "lr", "grad_norm")
    assert [tuple(p[k] for k in keys) for p in done["metrics"]] == [
        tuple(getattr(e, k) for k in keys) for e in events if e.type == "progress"
    ]
    assert [(v["step"], v["loss"]) for v in done["validation"]] == [
        (e.step, e.loss) for e in events if e.type == "validation"
    ]

    # a finished run: a plain resume is refused (it would re-run its last steps and overwrite its
    # LoRA); setting a larger total trains it longer, recorded in the sidecar (training/resume/extend.py)
    finished = client.post(f"/api/runs/{first['id']}/resume", json={})
    assert finished.status_code == 400 and "set steps above" in finished.text, finished.text
    assert 'API: {"settings": {"steps": N}}' in finished.json()["problems"][0]["message"]  # not only --set
    newest = client.get(f"/api/runs/{first['id']}/checkpoints").json()["checkpoints"][-1]["step"]
    offered = client.get(f"/api/runs/{done['id']}").json()
    assert offered["resume_step"] is None and offered["train_longer"] == {"from_step": newest, "steps": STEPS}
    same = client.post(f"/api/runs/{done['id']}/resume", json={"settings": {"steps": STEPS}})
    assert same.status_code == 400 and same.json()["problems"][0]["field"] == "steps", same.text
    longer = client.post(f"/api/runs/{first['id']}/resume", json={"settings": {"steps": STEPS + 2}})
    assert longer.status_code == 201, longer.text
    extended = wait_status(client, longer.json()["id"], FINAL)
    wait_idle(client)
    assert extended["status"] == "completed" and extended["steps_run"] == STEPS + 2, extended["error"]
    record = json.loads((outputs / "res" / "res.json").read_text())["extensions"]
    assert [(r["from_steps"], r["to_steps"]) for r in record] == [(STEPS, STEPS + 2)]
    assert client.get(f"/api/runs/{extended['id']}").json()["train_longer"]["steps"] == STEPS + 2
