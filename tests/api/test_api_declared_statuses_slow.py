"""The declared statuses test_api_declared_statuses.py leaves to this file (its SLOW_PROVOKED),
each provoked through its real route (RELIABILITY 1870; before, UNPROVOKED: read from the code,
shown by no request):

- `POST /api/generate` 500 GenerationFailed, 507 NoSpaceLeft and 504 GenerationTimedOut from a
  spawned generation worker whose engine is a stand-in (tests/api/status_generation_worker.py):
  its render raises, its PNG write meets ENOSPC, its render hangs past the allowance lowered by
  `worker_timeout_scale` (and 503 GenerationWorkerLost: it exits mid-render);
- `POST /api/runs/{run_id}/resume` 507 / 500 from a real tiny run stopped with save (its
  checkpoint passes every check), resumed while every `writing` block fails with ENOSPC / EFBIG.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest
from api_helpers import FINAL, stop_after_first_step, upload_folder, wait_status
from status_conditions import failing_writes
from status_generation_worker import DIE_PROMPT, FAIL_PROMPT, FULL_PROMPT, HANG_PROMPT, STAND_IN_FAILURE
from status_generation_worker import status_generation_worker as worker_target
from test_api_declared_statuses import GEN, RESUME, SLOW_PROVOKED

from live_server import live_server
from lorastudio.api.app import create_app
from lorastudio.settings import Settings

pytestmark = pytest.mark.slow


def test_generation_worker_statuses_through_the_route(
    studio_home: Path, tiny_model: Callable[[str], Path]
) -> None:
    """500 / 507 / 503 / 504 of POST /api/generate, each from its worker's real reply, death or
    silence (the 503 of a worker lost, not only the server stopping's of the default test)."""
    settings = Settings(home=studio_home, worker_timeout_scale=0.1)  # 12 s to start, 15 s to render
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "steps": 1, "width": 32, "height": 32}
    with live_server(create_app(settings, generation_target=worker_target)) as server:
        client = server.client
        made = client.post("/api/generate", json={**body, "prompt": "plain"})
        assert made.status_code == 201, made.text  # the stand-in renders: the route's success first
        failed = client.post("/api/generate", json={**body, "prompt": FAIL_PROMPT})
        assert failed.status_code == 500 and failed.json()["error"] == "GenerationFailed", failed.text
        assert STAND_IN_FAILURE in failed.json()["detail"]
        full = client.post("/api/generate", json={**body, "prompt": FULL_PROMPT})
        assert full.status_code == 507 and full.json()["error"] == "NoSpaceLeft", full.text
        died = client.post("/api/generate", json={**body, "prompt": DIE_PROMPT})  # not a server stopping's
        assert died.status_code == 503 and died.json()["error"] == "GenerationWorkerLost", died.text
        hung = client.post("/api/generate", json={**body, "prompt": HANG_PROMPT})
        assert hung.status_code == 504 and hung.json()["error"] == "GenerationTimedOut", hung.text
        assert hung.json()["detail"].startswith("the generation worker did not finish 1 step at 32x32")
        assert sorted(p.name for p in (studio_home / "gallery").glob("*.png")) == [made.json()["file"]]
        assert client.get("/api/info").status_code == 200  # the server goes on
    assert ("POST", GEN, 504) in SLOW_PROVOKED


def test_resume_statuses_of_refused_writes(
    server, sample_dataset: Path, flux_config: Callable[..., dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """507 (ENOSPC) and 500 (EFBIG) of a resume whose checkpoint passes every check, then the
    studio's writes are refused; once they are not, the same resume is accepted."""
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post("/api/train/start", json={"config": flux_config(steps=30, save_every=30)})
    assert started.status_code == 201, started.text
    run = started.json()["id"]
    stop_after_first_step(client, run)
    for code, status in ((errno.ENOSPC, 507), (errno.EFBIG, 500)):
        with failing_writes(monkeypatch, code):
            refused = client.post(f"/api/runs/{run}/resume", json={})
        assert refused.status_code == status, refused.text
        assert ("POST", RESUME, status) in SLOW_PROVOKED
    resumed = client.post(f"/api/runs/{run}/resume", json={})  # the checkpoint was fit to resume
    assert resumed.status_code == 201, resumed.text
    assert wait_status(client, resumed.json()["id"], FINAL)["status"] == "completed"
