"""A server stopped while its active job's worker is not started yet (RELIABILITY 1480): the job
ends at once as a queued one does (record interrupted, dataset claim released), however long the
spawn takes; the worker that finishes starting after the stop is killed and never pumped (it is
told to stop before it trains). The spawn is held open by an event, never by a sleep racing the
host: in process, a stand-in worker, no child process (well under a second each); a spawn that fails
after the stop leaves the job interrupted, not failed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lorastudio.jobs import dispatch
from lorastudio.jobs.dataset_claims import CLAIMS_DIR
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from polling import until

WAIT_S = 30.0  # a bound for the conditions awaited, never a measure


class SlowSpawn:
    """A worker whose `start()` blocks until the test releases it (a spawn on a loaded host),
    recording what the service asked of it; it trains only if it is pumped (`next_event`)."""

    generation = 0

    def __init__(self) -> None:
        self.entered = threading.Event()  # its start() is running
        self.release = threading.Event()  # let start() return
        self.calls: list[str] = []
        self.stop_asked: bool | None = None
        self.fail = False
        self._exit: int | None = None

    def start(self) -> int:
        self.calls.append("start")
        self.entered.set()
        if not self.release.wait(WAIT_S):
            raise AssertionError("the test never released the spawn")
        if self.fail:
            raise OSError("no memory for the worker")  # a spawn that fails after all
        self.calls.append("started")
        return 4242

    @property
    def pid(self) -> int | None:
        return 4242

    @property
    def exitcode(self) -> int | None:
        return self._exit

    def next_event(self, timeout: float) -> Any:
        self.calls.append("pumped")  # the job's events read: the worker would be training
        self._exit = 0
        return None

    def request_stop(self, save: bool) -> None:
        self.calls.append("stop")
        self.stop_asked = save

    def terminate(self) -> None:
        self.kill()

    def kill(self) -> None:
        self.calls.append("kill")
        self._exit = -9

    def escalate(self, *args: Any) -> None:
        pass

    def join(self, timeout: float) -> bool:
        return self._exit is not None

    def failure_reason(self) -> str:
        return "exited"

    def silence_note(self, silent_s: float) -> str | None:
        return None

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def spawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowSpawn]:
    worker = SlowSpawn()
    monkeypatch.setattr(dispatch, "new_job_worker", lambda *args, **kwargs: worker)
    yield worker
    worker.release.set()  # no dispatcher thread left blocked, whatever the outcome


def _config(model: Path) -> dict[str, Any]:
    return {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": 32,
            "steps": 3, "output_name": "run"}  # fmt: skip


def _claims(settings: Settings) -> list[str]:
    folder = settings.home / CLAIMS_DIR
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _service(settings: Settings, arbiter: GpuArbiter) -> tuple[JobService, RunStore]:
    store = RunStore.open(settings.db_path)
    return JobService(settings, store, arbiter, worker_target=print).start(), store  # the target never runs


def test_a_stop_during_the_workers_spawn_ends_the_job_and_kills_the_late_worker(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, spawn: SlowSpawn
) -> None:
    service, store = _service(settings, GpuArbiter())
    job = service.submit(_config(tiny_model("flux")))
    assert spawn.entered.wait(WAIT_S), "the dispatcher never started the worker"
    assert _claims(settings), "a live job holds its dataset's claim"

    service.shutdown(timeout=0.05)  # the spawn is still under way: the dispatcher cannot end yet

    # the job ended as a queued one does, before its worker exists
    assert service._thread.is_alive()
    record = store.get_run(job["id"], max_points=0)
    assert record["status"] == "interrupted", record["status"]
    assert "before this run's worker started" in (record["error"] or "")
    assert service.job(job["id"])["status"] == "interrupted"
    assert _claims(settings) == [], "a claim outlived the server's stop"
    assert spawn.calls == ["start", "stop"] and spawn.stop_asked is False  # told to stop before it trains

    spawn.release.set()  # the spawn finishes after the stop
    service._thread.join(WAIT_S)
    assert not service._thread.is_alive()
    assert spawn.calls == ["start", "stop", "started", "kill", "close"], spawn.calls  # never pumped
    assert store.get_run(job["id"], max_points=0)["status"] == "interrupted"
    store.close()


def test_a_stop_while_the_job_waits_for_the_gpu_ends_it_and_starts_no_worker(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, spawn: SlowSpawn
) -> None:
    arbiter = GpuArbiter()
    service, store = _service(settings, arbiter)
    generation = arbiter.generation()
    generation.__enter__()  # a generation in flight: the job waits for the GPU (up to 10 min)
    try:
        job = service.submit(_config(tiny_model("flux")))
        until(lambda: arbiter.training_job == job["id"], WAIT_S, "the job waiting for the GPU")

        service.shutdown(timeout=0.05)

        assert store.get_run(job["id"], max_points=0)["status"] == "interrupted"
        assert _claims(settings) == []
    finally:
        generation.__exit__(None, None, None)
    service._thread.join(WAIT_S)
    assert not service._thread.is_alive()
    assert spawn.calls == [], "a worker was started for a job the server's stop had ended"
    assert arbiter.training_job is None
    store.close()


def test_a_spawn_that_fails_after_the_stop_leaves_the_job_interrupted(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, spawn: SlowSpawn
) -> None:
    service, store = _service(settings, GpuArbiter())
    job = service.submit(_config(tiny_model("flux")))
    assert spawn.entered.wait(WAIT_S), "the dispatcher never started the worker"
    service.shutdown(timeout=0.05)
    spawn.fail = True
    spawn.release.set()
    service._thread.join(WAIT_S)
    assert not service._thread.is_alive()
    record = store.get_run(job["id"], max_points=0)
    assert record["status"] == "interrupted", record  # not "failed: could not start the worker"
    assert "before this run's worker started" in (record["error"] or "")
    store.close()
