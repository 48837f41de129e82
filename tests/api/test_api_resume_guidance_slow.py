"""RELIABILITY 1872: a step-distilled FLUX.2 klein run recorded before fix 1682 with a sample
prompt's own `guidance` above 1 resumes as it was, and its resume answer says so (before: only
the run's preflight, once the worker ran, said it: RELIABILITY 1751). A real tiny klein run on
the CPU, stopped with save; its checkpoint's recorded sample prompts given guidance 4 as a run of
that version recorded them (sample prompts are no part of a checkpoint's identity)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from api_helpers import FINAL, LiveServer, stop_after_first_step, upload_folder, wait_status

pytestmark = pytest.mark.slow


def test_a_distilled_klein_resume_answer_warns_of_sample_guidance(
    server: LiveServer, sample_dataset: Path, tiny_model: Callable[[str], Path], studio_home: Path
) -> None:
    client = server.client
    base = studio_home / "models" / "klein-distilled"
    shutil.copytree(tiny_model("flux2-klein"), base)
    index = json.loads((base / "model_index.json").read_text())
    (base / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    config = {"family": "flux2-klein", "base_model": str(base), "data_dir": "shapes", "resolution": 32}
    config |= {"steps": 30, "save_every": 30, "output_name": "klein", "sample_prompts": ["a dog"]}
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    run = started.json()["id"]
    stop_after_first_step(client, run, timeout=180)
    (info_file,) = (studio_home / "outputs" / "klein" / "checkpoints").glob("step-*/identity.json")
    info = json.loads(info_file.read_text())
    info["config"]["sample_prompts"] = [{"prompt": "a dog", "guidance": 4}]  # as recorded before 1682
    info_file.write_text(json.dumps(info))

    resumed = client.post(f"/api/runs/{run}/resume", json={})
    assert resumed.status_code == 201, resumed.text
    (said,) = [w for w in resumed.json()["dataset_warnings"] if "guidance" in w]
    assert said.startswith("sample_prompts.0.guidance 4: Flux2KleinPipeline runs no")
    assert "resumes as it was" in said
    assert said in client.get(f"/api/runs/{resumed.json()['id']}").json()["dataset_warnings"]
    client.post("/api/train/stop", json={"save": False})
    wait_status(client, resumed.json()["id"], FINAL)
