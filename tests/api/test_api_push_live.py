"""A LoRA pushed to the hub while a live training job writes its run (a resume or an extension
rewrites the LoRA and its sidecar when it ends) is refused (409 JobActive naming the job): the
push read the sidecar, then the LoRA, each at its own moment, so it could commit the resumed
LoRA with the model card and sidecar of the run before it (RELIABILITY 1923). The job waits for
the GPU (a generation holds it: jobs/gpu.py), so it is live and no worker starts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from api_helpers import FINAL, wait_status
from fastapi.testclient import TestClient

from lorastudio.settings import Settings


def test_a_push_of_a_run_a_live_job_writes_is_refused_naming_the_job(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict], sample_dataset: Path
) -> None:
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    with client.app.state.arbiter.generation():  # type: ignore[attr-defined]
        started = client.post("/api/train/start", json={"config": flux_config(output_name="live")})
        assert started.status_code == 201, started.text
        job = started.json()["id"]
        pushed = client.post("/api/loras/live/push", json={"repo": "a/b"})
        assert pushed.status_code == 409, pushed.text
        assert pushed.json() == {
            "error": "JobActive",
            "detail": f"training job {job} writes 'live' now (its LoRA and sidecar): push it when it ends",
        }
        other = client.post("/api/loras/other/push", json={"repo": "a/b"})  # no live job writes it
        assert other.status_code == 404 and other.json()["error"] == "NotFound", other.text
        assert client.post("/api/train/stop", json={"save": False}).status_code == 200
    wait_status(client, job, FINAL)
