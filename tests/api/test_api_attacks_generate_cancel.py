"""Attacks on generation cancel (POST /api/generate/{request_id}/cancel, the client leaving):
a cancel that lands while the finished image is being saved, and a duplicate request of a
running id whose client leaves. The worker is replaced by an in-process stand-in that writes a
real PNG (what is under test is the service's bookkeeping, not the render)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from tests.polling import until

from generation_fakes import InProcessGeneration
from lorastudio.api.routes.generate import _cancel_when_gone
from lorastudio.errors import GenerationCancelled, JobActive, NotFound
from lorastudio.jobs import generation, generation_requests
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.generation_requests import MAX_IN_FLIGHT
from lorastudio.jobs.generation_worker import GenerationJob
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings


def _request() -> GenerationRequest:
    return GenerationRequest(family="flux", base_model="tiny", prompt="x", steps=1, width=32, height=32)


def test_a_cancel_landing_while_the_image_is_saved_never_keeps_a_cancelled_image(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = InProcessGeneration(settings, GpuArbiter())
    answers: list[str | Exception] = []
    real_write = generation.staged_write

    @contextlib.contextmanager
    def cancel_then_write(path: Path) -> Iterator[Path]:
        try:  # the cancel route, called while the finished image's sidecar is written
            answers.append(service.cancel("r-1"))
        except NotFound as err:
            answers.append(err)
        with real_write(path) as tmp:
            yield tmp

    monkeypatch.setattr(generation, "staged_write", cancel_then_write)
    try:
        result: dict[str, Any] | Exception = service.generate(_request(), "r-1")
    except GenerationCancelled as err:
        result = err
    kept = sorted(p.name for p in (settings.home / "gallery").iterdir())
    # either the cancel came too late (404: it ended) and the image is kept whole, or it won
    # and nothing is; never a cancel answered as done with the image kept
    if isinstance(answers[0], NotFound):
        assert isinstance(result, dict) and kept == sorted(
            [result["file"], Path(result["file"]).stem + ".json"]
        )
    else:
        assert isinstance(result, GenerationCancelled), (answers, result, kept)
        assert kept == [], kept
    assert service.in_flight == 0
    monkeypatch.setattr(generation, "staged_write", real_write)
    with pytest.raises(JobActive, match="not reused"):  # the ended request's id is retired
        service.generate(_request(), "r-1")
    again = service.generate(_request(), "r-2")  # the service usable
    assert (settings.home / "gallery" / again["file"]).is_file()


class _Blocking(InProcessGeneration):
    """The job waits for `release` (a generation that is running)."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.running = threading.Event()
        self.release = threading.Event()

    def _run_locked(self, job: GenerationJob, rid: str) -> dict[str, Any]:
        self.running.set()
        assert self.release.wait(120)  # the test's own bound: a generation that would never end
        return super()._run_locked(job, rid)


class _Gone:
    """A request whose client has left (its next message is the disconnect)."""

    async def receive(self) -> dict[str, str]:
        return {"type": "http.disconnect"}


def test_a_duplicate_of_a_running_id_whose_client_leaves_does_not_cancel_the_first(
    settings: Settings,
) -> None:
    service = _Blocking(settings, GpuArbiter())
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(service.generate, _request(), "r-1")
        assert service.running.wait(10)
        # the duplicate POST's own call is refused (409); its client leaves meanwhile: its
        # watcher must not cancel the request of the same id that another client runs
        with pytest.raises(JobActive):
            service.generate(_request(), "r-1", owner=object())
        watcher = asyncio.run(_watch_briefly(service, "r-1", object()))
        assert watcher is None
        service.release.set()
        result = first.result(10)
    assert (settings.home / "gallery" / result["file"]).is_file()
    assert service.in_flight == 0


def test_a_client_that_leaves_before_its_request_is_registered_still_cancels_it(
    settings: Settings,
) -> None:
    service = _Blocking(settings, GpuArbiter())
    owner = object()

    async def scenario() -> Exception | dict[str, Any]:
        watcher = asyncio.ensure_future(_cancel_when_gone(_Gone(), service, "r-2", owner))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)  # the disconnect is seen before the request is in flight
        try:
            return await asyncio.to_thread(service.generate, _request(), "r-2", owner)
        except GenerationCancelled as err:
            return err
        finally:
            watcher.cancel()

    timer = threading.Timer(1.0, service.release.set)  # the render takes a second
    timer.start()
    try:
        assert isinstance(asyncio.run(scenario()), GenerationCancelled)
    finally:
        timer.cancel()
        service.release.set()
    assert not (settings.home / "gallery").exists() or list((settings.home / "gallery").iterdir()) == []
    assert service.in_flight == 0


async def _watch_briefly(service: GenerationService, rid: str, owner: object) -> None:
    """Run the route's disconnect watcher for a client already gone, for half a second."""
    watcher = asyncio.ensure_future(_cancel_when_gone(_Gone(), service, rid, owner))  # type: ignore[arg-type]
    await asyncio.sleep(0.5)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher


ODD_IDS = ["x" * 65, "é", "a/b", "..", "a b", "a\x00b", "a.png", "%2e%2e", "a\\b", ""]


def test_odd_request_ids_are_refused_by_both_routes_and_nothing_is_left(
    settings: Settings, client: TestClient
) -> None:
    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}
    for rid in ODD_IDS:
        resp = client.post("/api/generate", json={**body, "request_id": rid})
        assert resp.status_code == 422, (rid, resp.status_code)
        cancel = client.post(f"/api/generate/{quote(rid, safe='')}/cancel")
        assert cancel.status_code in (400, 404, 405, 422), (rid, cancel.status_code)
    assert client.post("/api/generate/nobody/cancel").status_code == 404
    assert service.in_flight == 0 and not service.running.is_set()


def test_a_cancel_storm_on_a_waiting_request_ends_it_once_and_leaves_the_worker_usable(
    settings: Settings, client: TestClient
) -> None:
    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}
    with ThreadPoolExecutor(2) as pool:
        holder = pool.submit(client.post, "/api/generate", json={**body, "request_id": "holder"})
        assert service.running.wait(10)
        waiter = pool.submit(client.post, "/api/generate", json={**body, "request_id": "waiter"})
        until(lambda: service.in_flight == 2, 60, "the waiting request in flight")  # else: its cancels 404
        answers = {client.post("/api/generate/waiter/cancel").json().get("was") for _ in range(100)}
        assert waiter.result(10).status_code == 409
        assert answers <= {"waiting", None}, answers  # then 404s once it ended
        service.release.set()
        assert holder.result(10).status_code == 201
    reused = client.post("/api/generate", json={**body, "request_id": "waiter"})  # retired: it ended
    assert reused.status_code == 409 and "not reused" in reused.json()["detail"], reused.text
    again = client.post("/api/generate", json={**body, "request_id": "waiter-2"})
    assert again.status_code == 201, again.text
    files = sorted(p.suffix for p in (settings.home / "gallery").iterdir())
    assert files == [".json", ".json", ".png", ".png"]  # the holder's and the new one's, no staging
    assert service.in_flight == 0


def test_a_flood_of_generations_waiting_for_the_worker_leaves_the_api_and_cancel_answering(
    settings: Settings, client: TestClient
) -> None:
    """Each waiting generation holds a server thread; past MAX_IN_FLIGHT more are refused at
    once (409), so the rest of the API (the cancel route included) never waits on them."""
    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}
    with ThreadPoolExecutor(60) as pool:
        posts = [
            pool.submit(client.post, "/api/generate", json={**body, "request_id": f"g{i}"}) for i in range(60)
        ]
        assert service.running.wait(10)
        # every POST is in: MAX_IN_FLIGHT wait, the others were refused
        until(
            lambda: sum(p.done() for p in posts) == 60 - MAX_IN_FLIGHT,
            60,
            "refusals of the POSTs past the cap",
        )
        with ThreadPoolExecutor(1) as probe:
            info = probe.submit(client.get, "/api/info")
            try:
                assert info.result(timeout=5).status_code == 200  # hung: the threads were all held
                cancel = probe.submit(client.post, "/api/generate/g59/cancel")
                assert cancel.result(timeout=5).status_code in (200, 404)
                assert service.in_flight <= MAX_IN_FLIGHT
            finally:  # let everything end whatever happened
                for _ in range(50):
                    for i in range(60):
                        with contextlib.suppress(NotFound):
                            service.cancel(f"g{i}")
                    service.release.set()
                    if service.in_flight == 0:
                        break
                    time.sleep(0.1)
        codes = sorted(p.result(30).status_code for p in posts)
    assert set(codes) <= {201, 409} and 409 in codes, codes
    refused = [p.result().json() for p in posts if p.result().status_code == 409]
    assert any("in flight" in r["detail"] for r in refused), refused[:3]
    assert service.in_flight == 0


def test_a_late_cancel_of_an_ended_request_never_stops_a_new_one_reusing_its_id(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Request A with id X ends; a cancel of X sent meanwhile arrives as request B with id X
    starts. Was: B was registered under X and the late cancel stopped it (409, nothing kept).
    An ended request's id is retired for RETIRED_FOR_S: the cancel answers 404 naming its end,
    B is refused at once (409, naming why) and runs nothing; an id retired that long is free."""
    service = _Blocking(settings, GpuArbiter())
    service.release.set()
    assert isinstance(service.generate(_request(), "x"), dict)  # A ended
    service.running.clear()
    service.release.clear()
    with ThreadPoolExecutor(1) as pool:
        b = pool.submit(service.generate, _request(), "x")  # B starts as the late cancel comes
        deadline = time.monotonic() + 10
        while not (b.done() or service.running.is_set()) and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(NotFound, match=r"no generation 'x' in flight \(it ended \d+ s ago\)"):
            service.cancel("x")
        service.release.set()
        with pytest.raises(JobActive, match="'x' named a generation that ended .* not reused for 10 minutes"):
            b.result(10)
    assert not service.running.is_set() and service.in_flight == 0  # B ran nothing

    client.app.state.generation = service  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}
    reused = client.post("/api/generate", json={**body, "request_id": "x"})
    assert reused.status_code == 409 and "send a new request_id" in reused.json()["detail"], reused.text
    assert client.post("/api/generate/x/cancel").status_code == 404
    assert client.post("/api/generate", json={**body, "request_id": "y"}).status_code == 201
    monkeypatch.setattr(generation_requests, "RETIRED_FOR_S", 0.2)
    time.sleep(0.3)
    again = client.post("/api/generate", json={**body, "request_id": "x"})  # retired long enough
    assert again.status_code == 201, again.text
    assert service.in_flight == 0


def test_retired_ids_are_capped(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ended request retires its id: a flood of requests (refused ones too, each checked
    under its id) keeps at most MAX_RETIRED of them, the oldest going first."""
    monkeypatch.setattr(generation_requests, "MAX_RETIRED", 5)
    service = InProcessGeneration(settings, GpuArbiter())
    for i in range(8):
        service.generate(_request(), f"f{i}")
    assert list(service._flight.retired) == [f"f{i}" for i in range(3, 8)]
    service.generate(_request(), "f0")  # forgotten: free again


def test_a_server_stop_ends_the_generations_in_flight_with_a_503_and_refuses_new_ones(
    settings: Settings, client: TestClient
) -> None:
    """The stop's hook (api/app.stop_generations, called from the server's signal handler)
    cancels the running and the waiting generation: both answer 503 ServerStopping, a new one
    is refused the same way, nothing is kept (session 25 genaudit; tests/reliability/
    test_generation_server_stop.py runs it in a real server with a real worker)."""
    from lorastudio.api.app import stop_generations

    client.app.state.generation = service = _Blocking(settings, GpuArbiter())  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "steps": 1, "width": 32, "height": 32}
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(client.post, "/api/generate", json={**body, "request_id": "running"})
        assert service.running.wait(10)
        waiting = pool.submit(client.post, "/api/generate", json={**body, "request_id": "waiting"})
        until(lambda: service.in_flight == 2, 60, "the waiting request in flight")
        stop_generations(client.app)
        assert waiting.result(10).status_code == 503  # ends at once
        service.release.set()  # the worker stops after its step (here: the blocked job returns)
        answers = [running.result(10), waiting.result(10)]
    assert [a.json()["error"] for a in answers] == ["ServerStopping", "ServerStopping"], [
        a.text for a in answers
    ]
    assert all(a.status_code == 503 and "the server is stopping" in a.json()["detail"] for a in answers)
    late = client.post("/api/generate", json={**body, "request_id": "late"})
    assert late.status_code == 503 and late.json()["error"] == "ServerStopping", late.text
    gallery = settings.home / "gallery"
    assert not gallery.is_dir() or list(gallery.iterdir()) == []
    assert service.in_flight == 0


class _Ordered(_Blocking):
    """The first job waits for `release`; every job records its request's seed as it runs."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.ran: list[int] = []

    def _run_locked(self, job: GenerationJob, rid: str) -> dict[str, Any]:
        if not self.ran:
            self.running.set()
            assert self.release.wait(120)
        self.ran.append(job.seed)
        return InProcessGeneration._run_locked(self, job, rid)


def test_generations_waiting_for_the_worker_run_in_the_order_they_came(settings: Settings) -> None:
    """A bare lock polled with a timeout handed the worker to whichever waiter woke first: on a
    live server with 8 clients in a loop one request waited 16.8 s where its turn came in 4
    (session 25 genaudit). The worker now goes to the waiting requests first come, first
    served, and a cancelled one leaves the queue."""
    service = _Ordered(settings, GpuArbiter())

    def request(seed: int) -> GenerationRequest:
        return GenerationRequest(
            family="flux", base_model="tiny", prompt="x", seed=seed, steps=1, width=32, height=32
        )

    with ThreadPoolExecutor(MAX_IN_FLIGHT) as pool:
        futures = [pool.submit(service.generate, request(0), "first")]
        assert service.running.wait(10)
        for seed in range(1, MAX_IN_FLIGHT):  # each in the queue before the next comes
            futures.append(pool.submit(service.generate, request(seed), f"r{seed}"))
            until(lambda n=seed: service.in_flight == n + 1 and service.waiting == n, 60, "in the queue")
        assert service.cancel("r3") == "waiting"
        until(lambda: service.waiting == MAX_IN_FLIGHT - 2, 60, "the cancelled one out of the queue")
        service.release.set()
        for f in futures:
            with contextlib.suppress(GenerationCancelled):
                f.result(60)
    assert service.ran == [s for s in range(MAX_IN_FLIGHT) if s != 3]
