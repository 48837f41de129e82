"""A generation that leaves `steps` out says the steps it will take from the start (RELIABILITY
1831): the server resolves the family's default for the base's flavour before the job runs
(jobs/generation_check.planned_steps), so its record and progress (GET /api/generations/{id})
name them before the worker's first step. Before, they said 0 until the worker's first count
(the generation worker reports `of` 0 until the pipeline has its timesteps)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.polling import until

from generation_fakes import InProcessGeneration
from lorastudio import families
from lorastudio.basemodels import ResolvedBase
from lorastudio.jobs.generation_check import planned_steps
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.generation_worker import GenerationJob
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import Settings

NOWHERE = ResolvedBase(source="someone/not-downloaded", folder=None)  # no configs on disk: the family's own


@pytest.mark.parametrize("name", families.names())
def test_each_familys_default_is_planned_and_the_requests_own_kept(name: str) -> None:
    spec = families.get(name).spec
    req = GenerationRequest(family=name, base_model=NOWHERE.source, prompt="x")
    assert planned_steps(req, NOWHERE) == spec.generation_defaults["num_inference_steps"] > 0
    assert planned_steps(GenerationRequest(family=name, base_model="b", prompt="x", steps=3), NOWHERE) == 3


class _Waiting(InProcessGeneration):
    """The worker stands ready (0 of 0 steps said: as the real one before its first step) and
    waits for `release`."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.ready = threading.Event()
        self.release = threading.Event()

    def _run_locked(self, job: GenerationJob, rid: str) -> dict[str, Any]:
        self._flight.start_running(rid, self)
        try:
            self._flight.stepped(rid, 0, job.steps or 0)  # generation_process: ready, `of` as asked
            self.ready.set()
            if not self.release.wait(60):  # the test's own bound
                raise TimeoutError("not released")
        finally:
            self._flight.stop_running()
        return super()._run_locked(job, rid)

    def cancel(self) -> None: ...

    def clear_cancel(self) -> None: ...


def test_a_generation_without_steps_says_the_familys_from_its_record_on(
    settings: Settings, client: TestClient
) -> None:
    client.app.state.generation = service = _Waiting(settings, GpuArbiter())  # type: ignore[attr-defined]
    body = {"family": "flux", "base_model": "tiny", "prompt": "x", "width": 32, "height": 32}
    sent = client.post("/api/generations", json={**body, "request_id": "d-1"})
    assert sent.status_code == 202, sent.text
    assert sent.json()["steps"] == 28  # FLUX.1's default, in the 202 (its record) already
    try:
        assert service.ready.wait(10)
        now = client.get("/api/generations/d-1").json()
        assert (now["state"], now["step"], now["steps"]) == ("generating", 0, 28)
    finally:
        service.release.set()
    done = until(
        lambda: (s := client.get("/api/generations/d-1").json())["state"] == "done" and s, 30, "done"
    )
    assert done["steps"] == 28  # type: ignore[index]
    assert done["image"].get("steps") is None  # type: ignore[index]  # the image keeps the request's null
