"""GET /api/loras/{name}/sidecar: the sidecar JSON beside a run's LoRA as the run wrote it (session
38 journey: the web UI and the API downloaded the .safetensors alone, so a LoRA fetched from a
server lost its record: the resolved config, the dataset fingerprint, the loader checks)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    settings.ensure_dirs()
    for name, sidecar in (("cats", True), ("bare", False)):
        folder = settings.outputs_dir / name
        folder.mkdir(parents=True)
        (folder / f"{name}.safetensors").write_bytes(b"\0" * 8)
        if sidecar:
            (folder / f"{name}.json").write_text(json.dumps({"family": "flux", "steps": 4}), encoding="utf-8")
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        yield client


def test_the_sidecar_downloads_as_the_run_wrote_it(client: TestClient, settings: Settings) -> None:
    answer = client.get("/api/loras/cats/sidecar")
    assert answer.status_code == 200, answer.text
    assert answer.content == (settings.outputs_dir / "cats" / "cats.json").read_bytes()
    assert answer.headers["content-type"].startswith("application/json")
    assert 'filename="cats.json"' in answer.headers["content-disposition"]


def test_a_missing_sidecar_or_lora_is_a_404_naming_it(client: TestClient) -> None:
    bare = client.get("/api/loras/bare/sidecar")
    assert bare.status_code == 404 and "bare.json is missing" in bare.json()["detail"]
    assert client.get("/api/loras/nobody/sidecar").status_code == 404
    assert client.get("/api/loras/..%2Fx/sidecar").status_code in (404, 422)
