"""A generation cancelled mid-run, in a real server (uvicorn) with the real generation worker on
tiny FLUX.1, its steps slowed and counted (generation_fault_workers.slow_steps_generation_worker):
by the cancel route or by the client leaving, the render stops between denoising steps, its
POST answers 409, nothing of it is in the gallery (no PNG, sidecar or staging file), and the
worker goes on with its pipeline resident. Was: the image was computed to the end and kept."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from generation_fault_workers import STEPS_FILE_ENV, slow_steps_generation_worker
from reliability_helpers import wait_for

from live_server import LiveServer, live_server
from lorastudio.api.app import create_app
from lorastudio.settings import Settings

STEPS = 40  # 8 s at the slowed pace: a cancel lands long before the end


@pytest.fixture
def server(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LiveServer, Path]]:
    steps = tmp_path / "steps.txt"
    steps.touch()
    monkeypatch.setenv(STEPS_FILE_ENV, str(steps))
    with live_server(create_app(settings, generation_target=slow_steps_generation_worker)) as live:
        yield live, steps


def _body(model: Path, **extra: object) -> dict:
    return {"family": "flux", "base_model": str(model), "prompt": "x", "seed": 1, "steps": STEPS,
            "width": 32, "height": 32, **extra}  # fmt: skip


def _steps(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _gallery(settings: Settings) -> list[str]:
    folder = settings.home / "gallery"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_the_cancel_route_stops_a_generation_between_steps(
    server: tuple[LiveServer, Path], settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    live, steps = server
    answer: dict[str, httpx.Response] = {}
    thread = threading.Thread(
        target=lambda: answer.setdefault(
            "r", live.client.post("/api/generate", json=_body(tiny_model("flux"), request_id="r-1"))
        )
    )
    thread.start()
    wait_for(lambda: _steps(steps) >= 2, 120, "two denoising steps")
    cancelled = live.client.post("/api/generate/r-1/cancel")
    at_cancel = _steps(steps)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json() == {"request_id": "r-1", "was": "running"}
    thread.join(30)
    response = answer["r"]
    assert response.status_code == 409 and "cancelled" in response.json()["detail"], response.text
    time.sleep(1.0)  # a render still going would count on
    assert _steps(steps) <= at_cancel + 1 < STEPS  # stopped after the step it was in
    assert _gallery(settings) == []  # nothing kept, nothing half-written
    assert live.client.post("/api/generate/r-1/cancel").status_code == 404  # it ended
    assert live.client.post("/api/generate/nobody/cancel").status_code == 404
    assert live.client.post("/api/generate/bad%20id/cancel").status_code == 422

    pid = live.app.state.generation.worker_pid
    after = live.client.post("/api/generate", json=_body(tiny_model("flux"), steps=2))
    assert after.status_code == 201, after.text
    assert live.app.state.generation.worker_pid == pid  # the worker went on, its pipeline resident
    assert [n for n in _gallery(settings) if n.endswith(".png")] == [after.json()["file"]]


def test_a_client_that_leaves_cancels_its_generation(
    server: tuple[LiveServer, Path],
    settings: Settings,
    tiny_model: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live, steps = server
    service = live.app.state.generation
    noticed: list[int] = []  # the steps counted when the server saw the client leave (its cancel)

    real_cancel = service.cancel

    def cancel(request_id: str, owner: object | None = None) -> str:
        was = real_cancel(request_id, owner)  # raises NotFound until the request is in flight
        noticed.append(_steps(steps))  # read after the worker was asked to stop
        return was

    monkeypatch.setattr(service, "cancel", cancel)
    leaving = httpx.Client(base_url=live.url, timeout=httpx.Timeout(30, read=3.0))
    with leaving, pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        leaving.post("/api/generate", json=_body(tiny_model("flux")))
    # the server sees the disconnect when its event loop gets to it (later on a loaded host):
    # the render stops after the step it was in from then on, as with the cancel route
    wait_for(lambda: noticed, 30, "the server's cancel of the request whose client left")
    wait_for(lambda: service.in_flight == 0, 30, "the request's end")
    time.sleep(1.0)  # a render still going would count on
    assert _steps(steps) <= noticed[0] + 1 < STEPS  # stopped right after the server saw the client leave
    assert _gallery(settings) == []
