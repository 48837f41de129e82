"""A server stop (Ctrl-C, SIGTERM) during a generation (session 25 generation audit), in a real
uvicorn server as `lorastudio serve` runs it (api/app._stopping_server, the same 5 s graceful
wait) with the real generation worker on tiny FLUX.1, its steps slowed and counted. Before, the
render went on through uvicorn's graceful wait, which then cancelled the request: its POST was
a plain-text 500 and the log a traceback ("Task cancelled, timeout graceful shutdown
exceeded"). Now the stop cancels the generations in flight: the running one stops between
denoising steps and answers 503 ServerStopping within the wait, one waiting for the worker
too, nothing of either is in the gallery."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import uvicorn
from generation_fault_workers import STEPS_FILE_ENV, slow_steps_generation_worker
from reliability_helpers import wait_for

from lorastudio.api.app import _stopping_server, create_app
from lorastudio.settings import Settings

STEPS = 40  # 8 s at the slowed pace: past the 5 s graceful wait


@pytest.mark.slow
def test_a_server_stop_answers_the_generations_in_flight_503_and_keeps_nothing(
    settings: Settings, tiny_model: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = tmp_path / "steps.txt"
    steps.touch()
    monkeypatch.setenv(STEPS_FILE_ENV, str(steps))
    app = create_app(settings, generation_target=slow_steps_generation_worker)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=5)
    server = _stopping_server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the server to start")
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "x", "seed": 1,
            "steps": STEPS, "width": 32, "height": 32}  # fmt: skip
    answers: dict[str, httpx.Response] = {}

    def post(name: str) -> None:
        answers[name] = httpx.post(f"{url}/api/generate", json={**body, "request_id": name}, timeout=120)

    posts = [threading.Thread(target=post, args=(name,)) for name in ("running", "waiting")]
    posts[0].start()
    wait_for(lambda: len(steps.read_text().splitlines()) >= 2, 120, "the render's second step")
    posts[1].start()
    wait_for(lambda: app.state.generation.in_flight == 2, 30, "the second request to wait")
    server.handle_exit(signal.SIGTERM, None)  # what a Ctrl-C or SIGTERM does
    for p in posts:
        p.join(60)
    thread.join(60)
    for name in ("running", "waiting"):
        answer = answers[name]
        assert answer.status_code == 503, (name, answer.text)  # not cut by the wait's end (a 500)
        assert (
            answer.json()["error"] == "ServerStopping" and "the server is stopping" in answer.json()["detail"]
        )
    assert len(steps.read_text().splitlines()) < STEPS
    gallery = settings.home / "gallery"
    assert not gallery.is_dir() or list(gallery.iterdir()) == []
