"""Training through HTTP on a real uvicorn server with real worker subprocesses on the tiny
FLUX.1 model: the whole job (with the typed shapes of its events and records, the plan it ran
with and its sample previews), a stop while loading, a stop without saving (a stop with saving:
test_api_resume.py; a killed worker: tests/reliability/test_worker_kills.py)."""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from api_helpers import FINAL, LiveServer, read_events, upload_folder, wait_idle, wait_status
from PIL import Image
from pydantic import TypeAdapter

from lorastudio import families
from lorastudio.api.schemas_runs import PhaseOut, StatusEvent, TrainConfigOut
from lorastudio.jobs.records import now_iso

PROMPTS = ["a red circle", "a blue square"]
# The full job: batches of 2 (the plan's micro-batch), previews of both prompts every 2 steps.
FULL_JOB = {
    "batch_size": 2,
    "sample_prompts": PROMPTS,
    "sample_every": 2,
    "sample_steps": 1,
    "max_sequence_length": 16,
    "save_lora_every": 2,
}


@pytest.mark.spawned_workers  # the forecast's process_start measured from a worker that imported torch
def test_full_job_start_events_complete_listed_and_generate(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    """One real run (a worker's start-up is most of a test's time) checked every way: the API's
    answers, the typed shapes the web UI's generated types rely on (test_api_typed_responses.py
    checks the schema), the plan a tiny CPU run records (test_api_plan.py: the plan API) and the
    sample previews: the sample_ready event reaches the event stream and the status snapshot, the
    run lists its samples and serves the PNGs, and nothing outside its samples/ folder."""
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    info = client.get("/api/info").json()
    shapes = next(d for d in info["datasets"] if d["name"] == "shapes")
    assert (shapes["images"], shapes["captions"]) == (8, 8)
    flux = next(f for f in info["families"] if f["name"] == "flux")
    assert "fp32" in flux["precisions"] and flux["defaults"]["lora_rank"] > 0
    wide = {f["name"]: f["wide_compile"] for f in info["families"]}
    assert wide == {name: name == "sdxl" for name in families.names()}  # every family listed; wide: SDXL only
    kontext = next(f for f in info["families"] if f["name"] == "flux-kontext")
    assert kontext["control_images"] == [0, 1] and flux["control_images"] == [0, 0]  # Kontext: edit or not

    report = client.post("/api/train/preflight", json={"config": flux_config(output_name="e2e", **FULL_JOB)})
    assert report.status_code == 200, report.text
    assert report.json()["dataset"]["images_used"] == 8
    assert not (Path(info["outputs_root"]) / "e2e").exists()  # preflight wrote nothing

    with ThreadPoolExecutor(2) as pool:  # two starts at once, neither willing to queue
        answers = list(
            pool.map(
                lambda name: client.post(
                    "/api/train/start",
                    json={"config": flux_config(output_name=name, **FULL_JOB), "queue": False},
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

    # the SSE status events and the job phases match their declared models
    statuses = [StatusEvent.model_validate(e) for e in events if e["type"] == "status"]
    seen = [s.status for s in statuses]
    assert [s for s in seen if s in ("preparing", "running")] == ["preparing", "running"], seen
    assert all(s.job_id == job_id and s.error is None for s in statuses)
    phases = [e for e in events if e["type"] in ("model_load_started", "model_load_completed", "preparing")]
    assert phases, "a run reports its loading and preparing phases"
    adapter = TypeAdapter(PhaseOut)
    for raw in phases:
        phase = adapter.validate_python({k: v for k, v in raw.items() if k != "job_id"})
        assert phase.type == raw["type"]

    # the plan the run used, streamed once before the first step: on the CPU the settings decide
    streamed = [e for e in events if e["type"] == "plan_chosen"]
    assert len(streamed) == 1, kinds
    assert kinds.index("plan_chosen") < kinds.index("progress")
    plan = job["plan"]
    assert plan is not None and plan["decided_by"] == "settings" and plan["trials"] == []
    assert (plan["base_precision"], plan["gradient_checkpointing"], plan["offload_blocks"]) == (
        "fp32",
        "off",
        0,
    )
    assert plan["micro_batch_size"] == 2 and plan["compile"] is False
    assert {k: v for k, v in streamed[0].items() if k != "job_id"} == plan

    assert [
        p["step"] for p in client.get("/api/train/status", params={"since": 2}).json()["job"]["metrics"]
    ] == [3, 4]

    # sample previews at steps 2 and 4: in the event stream and the status snapshot
    ready = [e for e in events if e["type"] == "sample_ready"]
    assert [(e["step"], len(e["images"])) for e in ready] == [(2, 2), (4, 2)]
    assert job["samples"] == {"step": 4, "images": ["samples/step-000004-0.png", "samples/step-000004-1.png"]}

    run = client.get(f"/api/runs/{job_id}").json()
    assert run["status"] == "completed" and len(run["metrics"]) == 4
    assert {o["kind"] for o in run["outputs"]} == {"lora", "sidecar"}
    assert run["plan"] == plan
    # the worker passed its process's start in: the next preflight's forecast adds it, as measured
    assert report.json()["time"]["phases"][0]["name"] == "process_start"  # before any run: a guess
    # at once: the run's timing record is written before its Complete event (RELIABILITY 1860)
    again = client.post("/api/train/preflight", json={"config": flux_config(output_name="next", **FULL_JOB)})
    start = next(p for p in again.json()["time"]["phases"] if p["name"] == "process_start")
    assert start["seconds"] > 0.3 and "measured by 1 earlier run" in start["basis"], start
    listed = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert job_id in listed
    # the resolved config: the same TrainConfigOut from the job, the run detail and the preflight
    assert TrainConfigOut.model_validate(run["config"]) == TrainConfigOut.model_validate(job["config"])
    assert run["config"]["output_name"] == name and run["config"]["compile"] == "auto"
    assert report.json()["config"]["lora_rank"] == job["config"]["lora_rank"]

    loras = client.get("/api/loras", params={"family": "flux"}).json()["loras"]
    assert [lo["name"] for lo in loras] == [name] and loras[0]["sidecar"]["steps"] == 4
    assert client.get("/api/loras", params={"family": "sdxl"}).json()["loras"] == []
    download = client.get(f"/api/loras/{name}/file")
    assert download.status_code == 200 and download.content == Path(loras[0]["path"]).read_bytes()
    assert client.get("/api/loras/..%2Fx/file").status_code in (400, 404)

    # the run's LoRAs by step: the save_lora_every snapshot at step 2, then the final LoRA
    by_step = client.get(f"/api/runs/{job_id}/loras").json()
    assert by_step == client.get(f"/api/loras/{name}/steps").json()
    assert [(lo["step"], lo["final"]) for lo in by_step["loras"]] == [(2, False), (4, True)]
    snapshot = client.get(by_step["loras"][0]["url"])
    assert snapshot.status_code == 200 and snapshot.content == Path(by_step["loras"][0]["path"]).read_bytes()
    assert client.get(f"/api/loras/{name}/file", params={"step": 3}).status_code == 404

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
    sha = {lo["step"]: hashlib.sha256(Path(lo["path"]).read_bytes()).hexdigest() for lo in by_step["loras"]}
    assert gallery[0]["loras"] == [
        {"name": name, "scale": 0.8, "step": None, "weights": None, "sha256": sha[4]}
    ]  # the exact file
    assert gallery[0]["url"] == gen.json()["url"]
    missing = client.post("/api/generate", json={**body, "loras": [{"name": "nope", "scale": 1.0}]})
    assert missing.status_code == 404
    # the snapshot of step 2 (a grid over steps renders one prompt and seed with each), the PNG
    # carrying its prompt and seed
    at_step = client.post("/api/generate", json={**body, "loras": [{"name": name, "scale": 0.8, "step": 2}]})
    assert at_step.status_code == 201, at_step.text
    assert at_step.json()["loras"] == [
        {"name": name, "scale": 0.8, "step": 2, "weights": None, "sha256": sha[2]}
    ]
    png = Image.open(io.BytesIO(client.get(at_step.json()["url"]).content))
    assert png.text["prompt"] == "a red circle" and png.text["seed"] == "3"
    assert json.loads(png.text["lorastudio"])["loras"] == [
        {"name": name, "scale": 0.8, "step": 2, "sha256": sha[2]}
    ]
    assert client.get(at_step.json()["url"]).content != image.content  # step 2's LoRA, not the final one
    no_step = client.post("/api/generate", json={**body, "loras": [{"name": name, "step": 3}]})
    assert no_step.status_code == 404 and "at step 3" in no_step.text

    # the run lists its samples and serves them
    samples = client.get(f"/api/runs/{job_id}/samples")
    assert samples.status_code == 200
    listed_samples = samples.json()["samples"]
    assert [(s["step"], s["index"], s["prompt"]) for s in listed_samples] == [
        (2, 0, PROMPTS[0]),
        (2, 1, PROMPTS[1]),
        (4, 0, PROMPTS[0]),
        (4, 1, PROMPTS[1]),
    ]
    # what renders each again: its settings and the file of its step (the run reads 16 tokens)
    assert [
        (s["seed"], s["width"], s["height"], s["guidance"], s["steps"], s["weights"]) for s in listed_samples
    ] == [(0, 32, 32, 3.5, 1, "raw")] * 4
    assert [s["lora"] for s in listed_samples] == [
        {"name": name, "step": s["step"], "weights": None} for s in listed_samples
    ]
    # read to the run's 16 tokens, which Generate takes (RELIABILITY 810): nothing to note
    assert all(s["max_sequence_length"] == 16 and s["note"] is None for s in listed_samples)
    outputs = Path(info["outputs_root"])
    for sample in listed_samples:
        served = client.get(sample["url"])
        assert served.status_code == 200 and served.headers["content-type"] == "image/png"
        assert served.content == (outputs / name / "samples" / sample["name"]).read_bytes()
        assert Image.open(io.BytesIO(served.content)).size == (32, 32)
    # only sample files directly in that run's samples/ folder are served
    (outputs / name / f"{name}.json").read_bytes()  # exists beside samples/, must not be served
    for bad in (f"..%2F{name}.json", f"{name}.json", "step-000004-0.jpg", "step-000009-0.png"):
        assert client.get(f"/api/runs/{job_id}/samples/{bad}").status_code == 404, bad
    (outputs / "secret.png").write_bytes(b"not yours")
    (outputs / name / "samples" / "step-000006-0.png").symlink_to(outputs / "secret.png")
    assert client.get(f"/api/runs/{job_id}/samples/step-000006-0.png").status_code == 404
    assert client.get("/api/runs/nope/samples").status_code == 404
    assert client.get("/api/runs/nope/samples/step-000004-0.png").status_code == 404

    # RunSummary.lora_file follows the file on disk
    assert listed[job_id]["lora_file"] is True and run["lora_file"] is True
    lora = Path(job["lora_path"])
    lora.rename(lora.with_suffix(".moved"))
    assert client.get(f"/api/runs/{job_id}").json()["lora_file"] is False
    assert {r["id"]: r for r in client.get("/api/runs").json()["runs"]}[job_id]["lora_file"] is False

    # a stored config with a key this version no longer knows is still served (the key dropped)
    old = {**run["config"], "output_name": "old-run", "retired_setting": 3}
    server.app.state.store.create_run("old1", "old-run", "flux", old, now_iso())
    served = client.get("/api/runs/old1")
    assert served.status_code == 200, served.text
    assert "retired_setting" not in served.json()["config"]
    assert served.json()["config"]["output_name"] == "old-run" and served.json()["lora_file"] is False


def test_stop_while_loading(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    """A valid start frees the resident generation pipeline (a refused one does not), and a stop
    before the worker has loaded its models is honoured. (A stop with save of a running
    job, its LoRA and sidecar, and the GPU and dataset held while it runs: test_api_resume.py's
    stopped run; a stop without save of a running job: tests/reliability/test_load.py's load run;
    a killed worker: tests/reliability/test_worker_kills.py, which kills one at every phase.)"""
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

    # a stop while the worker is still starting / loading models is honoured
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
