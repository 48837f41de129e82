"""Stand-ins for what the declared-statuses test (tests/api/test_api_declared_statuses.py) has no
real one of, each cheap and in-process (session 38 kpfix11, RELIABILITY 1832): a checkpoint folder
whose description is not one, a hub endpoint nothing listens on, a declared Content-Length past a
route's cap, and the fake hub of tests/unit/basemodels on 127.0.0.1."""

from __future__ import annotations

import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import constants as hf_constants

from lorastudio.api.routes.generate import REFERENCES_BODY_LIMIT
from lorastudio.basemodels.fetch import fetch_target
from lorastudio.basemodels.fetch_lock import FetchLock
from lorastudio.training.resume.checkpoint import CHECKPOINT_FILES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "basemodels"))
from fake_hub import FakeHub, FakeHubServer, FakeRepo, flux_repo_files  # noqa: E402

Call = Callable[..., Any]  # the test's Prober: (method, template, path=None, **request) -> answer
RESUME = "/api/runs/{run_id}/resume"


def cheap_stand_ins(
    call: Call, client: TestClient, home: Path, run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Statuses of what the default suite has no real one of, each from a cheap stand-in (session 38
    kpfix11, RELIABILITY 1832): resume's 400 from a checkpoint folder whose identity.json is not a
    checkpoint description; the push's 502 from a hub endpoint nothing listens on (a token set);
    the reference upload's own 413 from a declared Content-Length past its 200 MiB cap."""
    checkpoint = home / "outputs" / client.get(f"/api/runs/{run}").json()["output_name"] / "checkpoints"
    checkpoint /= "step-000001"
    checkpoint.mkdir(parents=True)
    for name in CHECKPOINT_FILES:
        (checkpoint / name).write_bytes(b"{}")
    refused = call("POST", RESUME, f"/api/runs/{run}/resume", json={})
    assert refused.status_code == 400 and "checkpoint description" in refused.text, refused.text
    shutil.rmtree(checkpoint.parent)
    with socket.socket() as closed:  # a port nothing listens on: the connection is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with monkeypatch.context() as patch:
        patch.setenv("HF_TOKEN", "hf_stand_in")
        patch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        patch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
        failed = call("POST", "/api/loras/{name}/push", "/api/loras/lo/push", json={"repo": "a/b"})
        assert failed.status_code == 502 and failed.json()["error"] == "HubUploadError", failed.text
    # a declared length past the route's own cap is refused before a byte is read (Starlette's
    # RequestBodyLimitMiddleware): the 413 without sending 200 MiB
    past = {
        "content-type": "multipart/form-data; boundary=x",
        "content-length": str(REFERENCES_BODY_LIMIT + 1),
    }
    over = call("POST", "/api/generate/references", content=b"--x--\r\n", headers=past)
    assert over.status_code == 413 and over.json()["error"] == "BodyTooLarge", over.text


def fake_hub_fetches(
    call: Call, client: TestClient, tiny_flux: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model fetch's 404 (no such revision: a missing repo is the hub's 401, a 403 here) and
    409 (a fetch of the model running in another process: its FetchLock held here, so nothing is
    downloaded) from the fake hub of tests/unit/basemodels on 127.0.0.1 (RELIABILITY 1832)."""
    hub = FakeHub(token="hf_not_used")
    hub.repos["acme/flux"] = FakeRepo(flux_repo_files(tiny_flux))
    with FakeHubServer(hub), monkeypatch.context() as patch:
        patch.setenv("HF_ENDPOINT", hub.url)
        patch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        patch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
        missing = call("POST", "/api/models/fetch", json={"repo_id": "acme/flux", "revision": "nope"})
        assert missing.status_code == 404, missing.text
        settings = client.app.state.settings  # type: ignore[attr-defined]
        lock = FetchLock(fetch_target(settings, "acme/flux", None), "acme/flux")
        try:
            twice = call("POST", "/api/models/fetch", json={"repo_id": "acme/flux"})
        finally:
            lock.release()
        assert twice.status_code == 409 and twice.json()["error"] == "JobActive", twice.text


def server_stopping(call: Call, client: TestClient, base_model: str) -> None:
    """Both generation forms' 503 of a server that began to stop (GenerationService.stopping, what
    its signal handler calls): a request sent then is refused before any work (RELIABILITY 1832)."""
    client.app.state.generation.stopping()  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": base_model, "prompt": "x", "width": 32, "height": 32, "steps": 1}
    for template in ("/api/generate", "/api/generations"):
        refused = call("POST", template, json=body)
        assert refused.status_code == 503 and refused.json()["error"] == "ServerStopping", refused.text
