"""Training through HTTP on a real uvicorn server with real worker subprocesses on the tiny
FLUX.1 model: the whole job, stop with and without saving, a killed worker."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from api_helpers import FINAL, LiveServer, read_events, upload_folder, wait_idle, wait_status


def test_full_job_start_events_complete_listed_and_generate(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    info = client.get("/api/info").json()
    shapes = next(d for d in info["datasets"] if d["name"] == "shapes")
    assert (shapes["images"], shapes["captions"]) == (8, 8)
    flux = next(f for f in info["families"] if f["name"] == "flux")
    assert "fp32" in flux["precisions"] and flux["defaults"]["lora_rank"] > 0
    assert {f["name"]: f["wide_compile"] for f in info["families"]} == {
        "sdxl": True, "flux": False, "qwen-image": False, "z-image": False
    }  # fmt: skip

    report = client.post("/api/train/preflight", json={"config": flux_config(output_name="e2e")})
    assert report.status_code == 200, report.text
    assert report.json()["dataset"]["images_used"] == 8
    assert not (Path(info["outputs_root"]) / "e2e").exists()  # preflight wrote nothing

    with ThreadPoolExecutor(2) as pool:  # two starts at once, neither willing to queue
        answers = list(
            pool.map(
                lambda name: client.post(
                    "/api/train/start", json={"config": flux_config(output_name=name), "queue": False}
                ),
                ["e2e", "e2e-other"],
            )
        )
    assert sorted(a.status_code for a in answers) == [201, 409], [a.text for a in answers]
    started = next(a for a in answers if a.status_code == 201)
    busy = next(a for a in answers if a.status_code == 409)
    assert busy.json()["error"] == "JobActive"
    job_id = started.json()["id"]
    name = started.json()["output_name"]

    events = read_events(client, job_id)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "status" and kinds[-1] == "complete"
    assert "model_load_started" in kinds and kinds.count("progress") == 4
    job = wait_status(client, job_id, FINAL)
    assert job["status"] == "completed" and job["steps_run"] == 4
    wait_idle(client)
    assert [p["step"] for p in job["metrics"]] == [1, 2, 3, 4]
    assert [
        p["step"] for p in client.get("/api/train/status", params={"since": 2}).json()["job"]["metrics"]
    ] == [3, 4]

    run = client.get(f"/api/runs/{job_id}").json()
    assert run["status"] == "completed" and len(run["metrics"]) == 4
    assert {o["kind"] for o in run["outputs"]} == {"lora", "sidecar"}
    assert any(r["id"] == job_id for r in client.get("/api/runs").json()["runs"])

    loras = client.get("/api/loras", params={"family": "flux"}).json()["loras"]
    assert [lo["name"] for lo in loras] == [name] and loras[0]["sidecar"]["steps"] == 4
    assert client.get("/api/loras", params={"family": "sdxl"}).json()["loras"] == []
    download = client.get(f"/api/loras/{name}/file")
    assert download.status_code == 200 and download.content == Path(loras[0]["path"]).read_bytes()
    assert client.get("/api/loras/..%2Fx/file").status_code in (400, 404)

    body = {
        "family": "flux",
        "base_model": str(flux_config()["base_model"]),
        "prompt": "a red circle",
        "seed": 3,
        "steps": 2,
        "width": 32,
        "height": 32,
        "loras": [{"name": name, "scale": 0.8}],
    }
    gen = client.post("/api/generate", json=body)
    assert gen.status_code == 201, gen.text
    image = client.get(gen.json()["url"])
    assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
    gallery = client.get("/api/gallery").json()["images"]
    assert [(g["file"], g["prompt"], g["seed"]) for g in gallery] == [(gen.json()["file"], "a red circle", 3)]
    assert gallery[0]["loras"] == [{"name": name, "scale": 0.8}] and gallery[0]["url"] == gen.json()["url"]
    missing = client.post("/api/generate", json={**body, "loras": [{"name": "nope", "scale": 1.0}]})
    assert missing.status_code == 404


def test_stop_while_loading_and_stop_with_save(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    outputs = Path(client.get("/api/info").json()["outputs_root"])
    gen_body = {
        "family": "flux",
        "base_model": flux_config()["base_model"],
        "prompt": "x",
        "width": 32,
        "height": 32,
    }

    # The resident generation pipeline is freed by a start only once the start is valid.
    assert client.post("/api/generate", json={**gen_body, "steps": 1}).status_code == 201
    generation = server.app.state.generation
    assert generation.loaded is not None
    refused = client.post("/api/train/start", json={"config": flux_config(output_name="x", lora_rank=0)})
    assert refused.status_code == 400 and generation.loaded is not None

    # 0. a stop while the worker is still starting / loading models is honoured
    early = client.post("/api/train/start", json={"config": flux_config(output_name="early", steps=100_000)})
    deadline = time.monotonic() + 10
    while generation.loaded is not None:  # released as the job takes the GPU
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert client.post("/api/train/stop", json={"save": True}).status_code == 200
    job = wait_status(client, early.json()["id"], FINAL)
    assert job["status"] == "stopped" and job["steps_run"] == 0 and job["lora_path"] is None
    assert not (outputs / "early").exists()
    wait_idle(client)

    # 1. stop with save: a LoRA of the steps run
    saved = client.post("/api/train/start", json={"config": flux_config(output_name="saved", steps=100_000)})
    assert saved.status_code == 201
    job_id = saved.json()["id"]
    wait_status(client, job_id, {"running"})
    assert client.post("/api/generate", json=gen_body).status_code == 409  # the GPU is training's
    caption = client.put(
        "/api/datasets/shapes/captions/" + sorted(sample_dataset.glob("*.png"))[0].name, json={"caption": "x"}
    )
    assert caption.status_code == 409  # the dataset is in use
    assert client.post("/api/train/stop", json={"save": True}).json()["status"] == "stopping"
    job = wait_status(client, job_id, FINAL)
    assert job["status"] == "stopped" and 0 < job["steps_run"] < 100_000
    sidecar = json.loads((outputs / "saved" / "saved.json").read_text())
    assert sidecar["stopped"] is True and sidecar["steps"] == job["steps_run"]
    assert Path(job["lora_path"]).is_file()


def test_stop_without_save_keeps_nothing_and_a_killed_worker_fails_fast(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    outputs = Path(client.get("/api/info").json()["outputs_root"])

    # 2. stop without save: nothing kept
    dropped = client.post(
        "/api/train/start", json={"config": flux_config(output_name="dropped", steps=100_000)}
    )
    job_id = dropped.json()["id"]
    wait_status(client, job_id, {"running"})
    client.post("/api/train/stop", json={"save": False})
    job = wait_status(client, job_id, FINAL)
    assert job["status"] == "stopped" and job["lora_path"] is None
    assert not (outputs / "dropped").exists()

    # 3. a killed worker: failed within 2 s, the GPU free again
    killed = client.post(
        "/api/train/start", json={"config": flux_config(output_name="killed", steps=100_000)}
    )
    job_id = killed.json()["id"]
    pid = wait_status(client, job_id, {"running"})["pid"]
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    job = wait_status(client, job_id, FINAL, timeout=5)
    assert time.monotonic() - t0 < 2.0
    assert job["status"] == "failed" and job["error"] == "worker exited unexpectedly (code -9)"
    assert client.get("/api/train/status").json()["busy"] is False
    assert server.app.state.arbiter.training_job is None
    assert client.get(f"/api/runs/{job_id}").json()["status"] == "failed"
