"""The asynchronous generation form (POST /api/generations answers 202 at once, GET polls it):
a generation that outlives a proxy's read timeout. Was: the only form was POST /api/generate,
whose answer is the image; a proxy that cut it (nginx's 60 s) made the studio cancel it as a
client that left. The service's bookkeeping is driven through an in-process stand-in of the
worker (tests/generation_fakes.py); one slow test runs the real worker on tiny FLUX.1 in a real
server, its client leaving after the 202 (RELIABILITY 1050)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from api_helpers import LiveServer
from fastapi.testclient import TestClient
from tests.polling import until

from generation_fakes import InProcessGeneration
from lorastudio.errors import GenerationCancelled, GenerationFailed
from lorastudio.jobs import generation_jobs, generation_records
from lorastudio.jobs.generation_requests import MAX_IN_FLIGHT
from lorastudio.jobs.generation_worker import GenerationJob
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings

BODY = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}


class _Blocking(InProcessGeneration):
    """The job reports steps 1 and 2 of 4, then waits for `release`; a prompt "fail" fails."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.running = threading.Event()
        self.release = threading.Event()

    def _run_locked(self, job: GenerationJob, rid: str) -> dict[str, Any]:
        self._flight.start_running(rid, _NoWorker())
        try:
            for done in (1, 2):
                self._flight.stepped(rid, done, 4)
            self.running.set()
            assert self.release.wait(60)  # the test's own bound
        finally:
            self._flight.stop_running()
        if self._flight.cancelled(rid):
            raise GenerationCancelled("generation cancelled after denoising step 2")
        if job.prompt == "fail":
            raise GenerationFailed("generation failed: RuntimeError: boom")
        return super()._run_locked(job, rid)


class _NoWorker:
    def cancel(self) -> None: ...

    def clear_cancel(self) -> None: ...


def _poll(client: Any, rid: str, states: set[str], timeout: float = 60) -> dict[str, Any]:
    return until(  # type: ignore[return-value]
        lambda: (s := client.get(f"/api/generations/{rid}").json())["state"] in states and s,
        timeout,
        f"generation {rid} in {states}",
    )


def _gallery(settings: Settings) -> list[str]:
    folder = settings.home / "gallery"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_generation_answers_202_at_once_and_its_progress_and_image_are_polled(
    settings: Settings, client: TestClient
) -> None:
    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    sent = client.post("/api/generations", json={**BODY, "request_id": "a-1"})
    assert sent.status_code == 202, sent.text  # answered while the generation waits to run
    assert sent.json()["request_id"] == "a-1" and sent.json()["state"] in {"queued", "loading", "generating"}
    assert service.running.wait(10)
    running = _poll(client, "a-1", {"generating"})
    assert (running["step"], running["steps"], running["image"], running["ended"]) == (2, 4, None, None)
    service.release.set()
    done = _poll(client, "a-1", {"done"})
    assert done["error"] is None and done["ended"] >= done["created"]
    image = done["image"]
    assert image["url"] == f"/gallery/{image['file']}" and image["prompt"] == "x"
    assert client.get(image["url"]).status_code == 200
    assert _gallery(settings) == sorted([image["file"], Path(image["file"]).stem + ".json"])
    assert client.get("/api/generations/a-1").json() == done  # kept, read again
    assert client.post("/api/generations/a-1/cancel").status_code == 404  # it ended
    again = client.post("/api/generations", json={**BODY, "request_id": "a-1"})
    assert again.status_code == 409 and "send a new request_id" in again.json()["detail"], again.text
    named = client.post("/api/generations", json=BODY)  # no id: the server names it
    assert named.status_code == 202 and named.json()["request_id"].startswith("gen-")
    assert _poll(client, named.json()["request_id"], {"done"})["image"]["file"]
    assert client.get("/api/generations/nobody").status_code == 404
    assert service.in_flight == 0


def test_a_cancel_and_a_failure_are_told_by_their_state(settings: Settings, client: TestClient) -> None:
    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    assert client.post("/api/generations", json={**BODY, "request_id": "c-1"}).status_code == 202
    assert service.running.wait(10)
    waiting = client.post("/api/generations", json={**BODY, "request_id": "c-2"})
    assert waiting.status_code == 202 and _poll(client, "c-2", {"queued"})["step"] == 0
    assert client.post("/api/generations/c-2/cancel").json() == {"request_id": "c-2", "was": "waiting"}
    cancelled = _poll(client, "c-2", {"cancelled"})
    assert cancelled["error"]["error"] == "GenerationCancelled" and cancelled["error"]["status"] == 409
    assert client.post("/api/generations/c-1/cancel").json() == {"request_id": "c-1", "was": "running"}
    assert client.get("/api/generations/c-1").json()["cancelling"] is True
    service.release.set()
    stopped = _poll(client, "c-1", {"cancelled"})
    assert stopped["image"] is None and stopped["cancelling"] is False and stopped["step"] == 2
    assert _gallery(settings) == []  # nothing kept of either

    service.release.clear()
    service.running.clear()
    assert (
        client.post("/api/generations", json={**BODY, "prompt": "fail", "request_id": "f-1"}).status_code
        == 202
    )
    assert service.running.wait(10)
    service.release.set()
    failed = _poll(client, "f-1", {"failed"})
    assert failed["error"] == {
        "error": "GenerationFailed",
        "detail": "generation failed: RuntimeError: boom",
        "status": 500,
        "problems": None,
        "current": None,
        "dataset": None,
        "forecast_gb": None,
        "available_gb": None,
    }
    assert _gallery(settings) == [] and service.in_flight == 0


def test_refusals_are_the_posts_answer_and_the_cap_is_shared(settings: Settings, client: TestClient) -> None:
    """A request the check refuses gets its 400 from the POST (nothing kept, no worker); past
    MAX_IN_FLIGHT the POST answers the cap's 409, counting the synchronous form's too."""
    real = client.post(
        "/api/generations",
        json={**BODY, "base_model": "nowhere", "steps": 300, "request_id": "over"},
    )
    # every problem at once, the base named by its field (session 36: the base was checked after)
    assert real.status_code == 400, real.text
    assert [p["field"] for p in real.json()["problems"]] == ["steps", "base_model"], real.text
    assert client.get("/api/generations/over").status_code == 404
    assert client.app.state.generation.worker_pid is None  # type: ignore[attr-defined]

    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    for i in range(MAX_IN_FLIGHT):
        assert client.post("/api/generations", json={**BODY, "request_id": f"q{i}"}).status_code == 202
    capped = client.post("/api/generations", json={**BODY, "request_id": "one-more"})
    assert capped.status_code == 409 and "in flight already" in capped.json()["detail"], capped.text
    sync = client.post("/api/generate", json={**BODY, "request_id": "sync"})
    assert sync.status_code == 409 and "in flight already" in sync.json()["detail"]
    assert client.get("/api/generations/one-more").status_code == 404
    service.release.set()
    for i in range(MAX_IN_FLIGHT):
        assert _poll(client, f"q{i}", {"done"})["image"] is not None
    assert service.in_flight == 0


def test_ended_generations_are_forgotten_after_a_while_and_past_a_count(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory keeps KEEP_MAX ended statuses for KEEP_FOR_S; the home's records (the newest
    generation_records.KEEP) answer past that, then 404."""
    client.app.state.generation = service = InProcessGeneration(settings, GpuArbiter())  # type: ignore[attr-defined]
    monkeypatch.setattr(generation_jobs, "KEEP_MAX", 2)
    monkeypatch.setattr(generation_records, "KEEP", 2)
    for i in range(3):
        assert client.post("/api/generations", json={**BODY, "request_id": f"e{i}"}).status_code == 202
        _poll(client, f"e{i}", {"done"})
    gone = client.get("/api/generations/e0")  # the oldest past both
    assert gone.status_code == 404 and "its record was removed" in gone.json()["detail"], gone.text
    assert len(service.jobs) == 2
    monkeypatch.setattr(generation_jobs, "KEEP_FOR_S", 0.2)
    time.sleep(0.3)
    kept = client.get("/api/generations/e2")  # forgotten in memory, read from its record
    assert kept.status_code == 200 and kept.json()["state"] == "done", kept.text
    assert len(service.jobs) == 0
    assert len(_gallery(settings)) == 6  # the images stay in the gallery


def test_after_a_restart_a_finished_generation_answers_done_and_one_in_flight_interrupted(
    settings: Settings, client: TestClient
) -> None:
    """RELIABILITY 1095: the statuses lived in the server's memory only, so after a restart GET
    answered 404 for both (the web UI's reload then said the server had forgotten it). A new
    service on the same home stands for the restarted server."""
    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    assert client.post("/api/generations", json={**BODY, "request_id": "r-done"}).status_code == 202
    assert service.running.wait(10)
    service.release.set()
    done = _poll(client, "r-done", {"done"})
    service.running.clear()
    service.release.clear()
    assert client.post("/api/generations", json={**BODY, "request_id": "r-flight"}).status_code == 202
    assert service.running.wait(10)
    failed = client.post("/api/generations", json={**BODY, "prompt": "fail", "request_id": "r-queued"})
    assert failed.status_code == 202  # waits behind r-flight

    client.app.state.generation = InProcessGeneration(settings, GpuArbiter())  # type: ignore[attr-defined]
    again = client.get("/api/generations/r-done")
    assert again.status_code == 200, again.text
    assert {k: again.json()[k] for k in ("state", "image", "step", "steps", "created", "ended", "error")} == {
        k: done[k] for k in ("state", "image", "step", "steps", "created", "ended", "error")
    }
    assert client.get(again.json()["image"]["url"]).status_code == 200
    for rid in ("r-flight", "r-queued"):  # its step as recorded at its hand-over (not rewritten each step)
        cut = client.get(f"/api/generations/{rid}")
        assert cut.status_code == 200, cut.text
        body = cut.json()
        assert (body["state"], body["step"], body["image"], body["ended"]) == ("interrupted", 0, None, None)
        assert body["error"]["error"] == "ServerStopping" and body["error"]["status"] == 503
        assert "the server stopped before generation" in body["error"]["detail"]
    reused = client.post("/api/generations", json={**BODY, "request_id": "r-done"})
    assert reused.status_code == 409 and "send a new request_id" in reused.json()["detail"], reused.text
    service.release.set()  # the old service's threads end (their records say so; no new server reads them)
    _poll(_ClientOf(client, service), "r-queued", {"failed"})


def test_after_a_restart_a_generation_whose_done_record_was_lost_answers_done_with_its_image(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1773: its image committed, its "done" record lost (a kill between the two, or
    a disk that refused the write): it answered interrupted, "nothing of it was kept"."""
    client.app.state.generation = service = InProcessGeneration(settings, GpuArbiter())  # type: ignore[attr-defined]
    real_write = generation_records.GenerationRecords.write

    def lose_done(self: Any, status: dict[str, Any], *a: Any, **k: Any) -> None:
        if status["state"] != "done":
            real_write(self, status, *a, **k)

    monkeypatch.setattr(generation_records.GenerationRecords, "write", lose_done)
    assert client.post("/api/generations", json={**BODY, "request_id": "r-lost"}).status_code == 202
    done = _poll(client, "r-lost", {"done"})  # from memory
    monkeypatch.setattr(generation_records.GenerationRecords, "write", real_write)
    assert service is not None
    client.app.state.generation = InProcessGeneration(settings, GpuArbiter())  # type: ignore[attr-defined]
    again = client.get("/api/generations/r-lost").json()
    assert (again["state"], again["error"]) == ("done", None), again
    assert again["image"]["file"] == done["image"]["file"] and again["image"]["url"] == done["image"]["url"]
    assert again["image"]["seconds"] == done["image"]["seconds"]
    record = json.loads((settings.home / "generation-jobs" / "r-lost.json").read_text(encoding="utf-8"))
    assert record["outcome"] == "done"  # rewritten: the next read needs no look in the gallery


class _ClientOf:
    """`client` answering from `service` (the server before the restart) while the test reads it."""

    def __init__(self, client: TestClient, service: Any) -> None:
        self.client, self.service = client, service

    def get(self, url: str) -> Any:
        self.client.app.state.generation = self.service  # type: ignore[attr-defined]
        return self.client.get(url)


@pytest.mark.slow  # a real worker's spawn and imports (~6 CPU s); by default the bookkeeping above, the
# worker's step reports (unit/generate/test_generation_load_cancel.py) and their reading
# (unit/jobs/test_generation_progress.py) cover its parts
def test_a_client_that_leaves_after_the_202_still_gets_its_image(
    server: LiveServer, settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """As a proxy that cuts the connection: the POST's client reads the 202 and closes. The real
    worker on tiny FLUX.1 renders it to the end; another client finds it by its id, with its
    denoising steps counted (the worker's reports), and its image in the gallery."""
    body = json.dumps({**BODY, "base_model": str(tiny_model("flux")), "steps": 2, "request_id": "p-1"})
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(
            f"POST /api/generations HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        head = conn.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 202"), head  # then the connection is gone
    done = _poll(server.client, "p-1", {"done", "failed", "cancelled"}, timeout=120)
    assert done["state"] == "done", done
    assert (done["step"], done["steps"]) == (2, 2)
    png = server.client.get(done["image"]["url"])
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"
    assert (settings.home / "gallery" / done["image"]["file"]).is_file()


def test_a_server_stop_ends_the_asynchronous_generations_as_failed_with_its_503(
    settings: Settings, client: TestClient
) -> None:
    """The stop's hook cancels them as it does the synchronous form's: each ends failed with
    ServerStopping (503), nothing kept, and a new POST is refused the same way."""
    from lorastudio.api.app import stop_generations

    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    for rid in ("s-run", "s-wait"):
        assert client.post("/api/generations", json={**BODY, "request_id": rid}).status_code == 202
    assert service.running.wait(10)
    stop_generations(client.app)
    service.release.set()
    for rid in ("s-run", "s-wait"):
        ended = _poll(client, rid, {"failed"})
        assert ended["error"]["error"] == "ServerStopping" and ended["error"]["status"] == 503, ended
    late = client.post("/api/generations", json={**BODY, "request_id": "s-late"})
    assert late.status_code == 503 and late.json()["error"] == "ServerStopping", late.text
    assert _gallery(settings) == [] and service.in_flight == 0


def test_a_recorded_image_without_the_answers_fields_is_a_404_naming_its_record(
    settings: Settings, client: TestClient
) -> None:
    """RELIABILITY 1160: a done record whose result held only its file (another version's, or
    written by hand) failed the answer's validation: 500 with nothing said."""
    client.app.state.generation = InProcessGeneration(settings, GpuArbiter())  # type: ignore[attr-defined]
    folder = generation_records.records_dir(settings.home)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"request_id": "r", "seq": 1, "created": 1.0, "step": 1, "steps": 1, "outcome": "done"}
    (folder / "r.json").write_text(json.dumps({**record, "result": {"file": "x.png"}}))
    answer = client.get("/api/generations/r")
    assert answer.status_code == 404, answer.text
    assert (
        str(folder / "r.json") in answer.json()["detail"]
        and "does not hold a status" in answer.json()["detail"]
    )


def test_an_unknown_generation_names_an_upgrade_among_its_reasons(client: TestClient) -> None:
    """RELIABILITY 1140: a generation sent to the server before an upgrade to the version that
    keeps records (1095) has none, and the 404 said only "never sent ... or its record was
    removed (200 newer generations since)", neither of which was so; it now names the upgrade and
    where a finished one's image is."""
    gone = client.get("/api/generations/sent-before-the-upgrade")
    assert gone.status_code == 404, gone.text
    assert "before this lorastudio's upgrade" in gone.json()["detail"] and "gallery" in gone.json()["detail"]
