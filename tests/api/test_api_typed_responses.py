"""The typed shapes the web UI's generated types rely on, checked against a real server and a real
tiny FLUX.1 run: the SSE `status` event and the job `phase` match their models, configs come back
as TrainConfigOut (also for an older stored config), and RunSummary.lora_file tells whether the
run's LoRA file is on disk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from api_helpers import FINAL, LiveServer, read_events, upload_folder, wait_idle, wait_status
from pydantic import TypeAdapter

from lorastudio.api.schemas import PhaseOut, StatusEvent, TrainConfigOut
from lorastudio.jobs.records import now_iso


def test_events_configs_and_lora_file_match_the_declared_models(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post("/api/train/start", json={"config": flux_config(output_name="typed")})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    events = read_events(client, job_id)
    job = wait_status(client, job_id, FINAL)
    wait_idle(client)
    assert job["status"] == "completed", job["error"]

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

    # the resolved config: the same TrainConfigOut from the job, the run detail and a preflight
    detail = client.get(f"/api/runs/{job_id}").json()
    assert TrainConfigOut.model_validate(detail["config"]) == TrainConfigOut.model_validate(job["config"])
    assert detail["config"]["output_name"] == "typed" and detail["config"]["compile"] == "auto"
    preflight = client.post("/api/train/preflight", json={"config": flux_config(output_name="typed2")})
    assert preflight.status_code == 200, preflight.text
    assert preflight.json()["config"]["lora_rank"] == job["config"]["lora_rank"]

    # lora_file follows the file on disk
    listed = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert listed[job_id]["lora_file"] is True and detail["lora_file"] is True
    lora = Path(job["lora_path"])
    lora.rename(lora.with_suffix(".moved"))
    assert client.get(f"/api/runs/{job_id}").json()["lora_file"] is False
    assert {r["id"]: r for r in client.get("/api/runs").json()["runs"]}[job_id]["lora_file"] is False

    # a stored config with a key this version no longer knows is still served (the key dropped)
    old = {**detail["config"], "output_name": "old-run", "retired_setting": 3}
    server.app.state.store.create_run("old1", "old-run", "flux", old, now_iso())
    served = client.get("/api/runs/old1")
    assert served.status_code == 200, served.text
    assert "retired_setting" not in served.json()["config"]
    assert served.json()["config"]["output_name"] == "old-run" and served.json()["lora_file"] is False


def test_openapi_declares_the_phase_union_and_typed_configs(server: LiveServer) -> None:
    doc = server.client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    phase = schemas["JobOut"]["properties"]["phase"]["anyOf"][0]
    assert phase["discriminator"]["propertyName"] == "type"
    assert set(phase["discriminator"]["mapping"]) == {
        "model_load_started",
        "model_load_completed",
        "preparing",
    }
    ref = "#/components/schemas/TrainConfigOut"
    for model in ("JobOut", "RunDetail", "PreflightOut"):
        config = schemas[model]["properties"]["config"]
        assert config.get("$ref") == ref or config.get("allOf") == [{"$ref": ref}], (model, config)
    assert "lora_file" in schemas["RunSummary"]["properties"]
