"""POST /api/generate refuses, before any work, what it cannot honour (issue 24 parts 3 and 8):
hostile LoRA files (400 naming the file and the reason), a bad revision (400, the fetch route's
rule), sizes and steps over the budget (400 with the reason). No generation worker is started
for a refused request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from api_helpers import LiveServer

from hostile_loras import hostile_cases
from lorastudio.settings import Settings


def test_refused_requests_start_no_worker(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    client = server.client
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "x", "steps": 1,
            "width": 32, "height": 32}  # fmt: skip
    for case, (data, reason) in hostile_cases().items():
        folder = settings.outputs_dir / case
        folder.mkdir(parents=True)
        (folder / f"{case}.safetensors").write_bytes(data)
        answer = client.post("/api/generate", json={**body, "loras": [{"name": case}]})
        assert answer.status_code == 400, (case, answer.text)
        (problem,) = answer.json()["problems"]
        assert problem["field"] == "loras.0" and reason in problem["message"], (case, problem)

    for revision in ("../../etc", "main\n", "a..b", "-x", " ", "x" * 201):
        answer = client.post("/api/generate", json={**body, "base_model": "acme/flux", "revision": revision})
        assert answer.status_code == 400, (revision, answer.text)
        assert [p["field"] for p in answer.json()["problems"]] == ["revision"]
        assert "is not a branch, tag or commit" in answer.text

    over = client.post("/api/generate", json={**body, "width": 4096, "height": 2048, "steps": 300})
    assert over.status_code == 400
    assert {(p["field"], p["message"]) for p in over.json()["problems"]} == {
        ("steps", "300: must be between 1 and 200"),
        (
            "width",
            "4096x2048 = 8,388,608 pixels is over the generation budget of 4,194,304 pixels (2048x2048) per image",
        ),
    }
    slow = client.post("/api/generate", json={**body, "width": 2048, "height": 2048, "steps": 51})
    assert slow.status_code == 400 and slow.json()["problems"] == [
        {"field": "steps", "message": "51 steps at 2048x2048 is over the generation budget of 210 M "
                                      "pixel-steps (at most 50 steps at this size)"}
    ]  # fmt: skip
    odd = client.post("/api/generate", json={**body, "width": 33, "height": 0})
    assert {p["field"] for p in odd.json()["problems"]} == {"width", "height"}
    assert server.app.state.generation.worker_pid is None  # nothing was started for any of them


def test_a_hung_generation_worker_is_a_504_and_the_server_goes_on(
    studio_home: Path, tiny_model: Callable[[str], Path]
) -> None:
    """LORASTUDIO_WORKER_TIMEOUT_SCALE scales every allowance (here ready in 120 s x 0.02 = 2.4 s);
    a worker that never says ready is stopped and the request gets 504 GenerationTimedOut."""
    from api_helpers import live_server

    from generation_hang_workers import silent_generation_worker
    from lorastudio.api.app import create_app

    settings = Settings(home=studio_home, worker_timeout_scale=0.02)
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "x", "steps": 1,
            "width": 32, "height": 32}  # fmt: skip
    with live_server(create_app(settings, generation_target=silent_generation_worker)) as server:
        answer = server.client.post("/api/generate", json=body)
        assert answer.status_code == 504, answer.text
        assert answer.json()["error"] == "GenerationTimedOut"
        assert answer.json()["detail"].startswith(
            "the generation worker did not say it is ready within 2.4 s"
        )
        assert server.client.get("/api/info").status_code == 200
