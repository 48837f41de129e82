"""A base-model path that cannot be resolved (a link that loops, a NUL byte) is a 400 naming the
field wherever a base model is given (adding it to the catalogue, a run's base_model or
base_config, a generation), never a 500 (pathlib's resolve raises RuntimeError "Symlink loop",
ValueError "embedded null byte")."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi.testclient import TestClient


def _problem(answer: object, field: str) -> str:
    body = answer.json()  # type: ignore[attr-defined]
    return next(p["message"] for p in body.get("problems", []) if p["field"] == field)


def test_a_base_model_path_that_cannot_be_resolved_is_a_400(client: TestClient, tmp_path: Path) -> None:
    loop = tmp_path / "loop.safetensors"
    os.symlink(loop, loop)  # a link to itself
    for path in (str(loop), str(tmp_path / "x\x00y")):
        added = client.post("/api/models/added", json={"path": path})
        assert added.status_code == 400, added.text
        assert "cannot be resolved" in _problem(added, "path")

    config = {"family": "flux", "base_model": str(loop), "data_dir": "nothing-here", "steps": 1}
    answer = client.post("/api/train/preflight", json={"config": config})
    assert answer.status_code == 400, answer.text
    assert "a link that loops" in _problem(answer, "base_model")
    generated = client.post(
        "/api/generate",
        json={
            "family": "flux",
            "base_model": str(loop),
            "prompt": "x",
            "steps": 1,
            "width": 32,
            "height": 32,
        },
    )
    assert generated.status_code == 400 and "a link that loops" in generated.text, generated.text


def test_a_tilde_name_holding_a_nul_byte_is_a_400(client: TestClient) -> None:
    """`~name\\x00`: pwd.getpwnam's ValueError escaped user_paths.expand_user (RELIABILITY 2011)."""
    for path in ("~\x00/x", "~nouser\x00"):
        added = client.post("/api/models/added", json={"path": path})
        assert added.status_code == 400 and "give an absolute folder path" in _problem(added, "path")
        config = {"family": "flux", "base_model": path, "data_dir": "nothing-here", "steps": 1}
        answer = client.post("/api/train/preflight", json={"config": config})
        assert answer.status_code == 400 and "use an absolute path" in _problem(answer, "base_model")
