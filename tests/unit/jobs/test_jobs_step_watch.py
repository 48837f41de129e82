"""The training worker's hang allowance (jobs/step_watch.py): a step loop silent past its
allowance (at least hang_min_s, hang_step_factor x its slowest step) is stopped as a
stop-and-save with the stop path's grace; a worker that does not answer is terminated, killed
and its job fails naming the silence; one that was only slow saves and ends stopped with the
note; announced work (a sample round) and the phases before the first step are not watched.
Real spawned workers (tests/unit/jobs/jobs_fake_workers.py) on a real job service."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import jobs_fake_workers as fakes
import pytest

from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.process import WorkerTarget
from lorastudio.jobs.service import JobService, Timeouts
from lorastudio.jobs.step_watch import StepWatch
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from polling import WORKER_START_S, until

FINAL = {"completed", "stopped", "cancelled", "failed", "interrupted"}
WATCH = {"hang_min_s": 1.0, "hang_step_factor": 5.0, "stop_grace_s": 0.5, "kill_grace_s": 0.5}


def _service(settings: Settings, target: WorkerTarget) -> JobService:
    store = RunStore.open(settings.db_path)
    return JobService(settings, store, GpuArbiter(), worker_target=target, timeouts=Timeouts(**WATCH)).start()


def _cfg(model: Path, **over: object) -> dict:
    base = {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": 32, "steps": 3}
    return {**base, **over}


def _final(service: JobService, job_id: str, timeout: float = 40.0) -> dict:
    deadline = time.monotonic() + timeout
    while (snap := service.job(job_id))["status"] not in FINAL:
        assert time.monotonic() < deadline, snap
        time.sleep(0.02)
    return snap


def _running(service: JobService, job_id: str, timeout: float = 40.0) -> float:
    """Wait for the job's first step; returns the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while service.job(job_id)["steps_run"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return time.monotonic()


@pytest.fixture
def model(tiny_model: Callable[[str], Path], shapes: Path) -> Path:
    return tiny_model("flux")


def test_the_allowance_is_the_slowest_unannounced_step_times_the_factor_at_least_the_minimum() -> None:
    watch = StepWatch(min_s=10.0, step_factor=4.0)
    for now, data in [
        (0.0, {"type": "progress"}),
        (3.0, {"type": "progress"}),  # a 3 s step
        (3.5, {"type": "busy", "work": "sample round"}),
        (60.0, {"type": "busy", "work": None}),
        (61.0, {"type": "progress"}),  # 58 s, but a sample round in between: not a step's time
        (62.0, {"type": "progress"}),
    ]:
        watch.saw(data, now)
    assert watch.slowest_step_s == 3.0 and watch.allowance_s() == 12.0
    assert StepWatch(min_s=10.0, step_factor=4.0).allowance_s() == 10.0


def test_a_step_loop_silent_past_its_allowance_is_stopped_then_killed_and_fails(
    settings: Settings, model: Path
) -> None:
    service = _service(settings, fakes.steps_then_hang_ignoring_stop)
    try:
        job = service.submit(_cfg(model))
        seen = _running(service, job["id"])
        snap = _final(service, job["id"])
        took = time.monotonic() - seen
        assert snap["status"] == "failed", snap
        assert "sent nothing for" in snap["error"] and "after step 2" in snap["error"], snap["error"]
        assert "terminated" in snap["error"] and snap["lora_path"] is None
        # the allowance (at least 1 s after the last step; 5 x the slowest step the service saw,
        # longer on a loaded host), then the stop grace (0.5 s) and the kill grace (0.5 s). The
        # watch fires within its poll of the allowance, by the service's own clock (the silence it
        # names, whole seconds); not bounded by this test's clock, which adds the worker's spawn,
        # its kill and reaping: seconds more on a loaded host.
        allowed = float(re.search(r"\(allowed: (\d+) s,", snap["error"]).group(1))
        silent = float(re.search(r"sent nothing for (\d+) s", snap["error"]).group(1))
        assert allowed >= WATCH["hang_min_s"] and allowed <= silent <= allowed + 1, snap["error"]
        assert took > WATCH["hang_min_s"], (took, snap["error"])
        with pytest.raises(ProcessLookupError):
            os.kill(snap["pid"], 0)
        assert service.arbiter.training_job is None and service.status()["busy"] is False
        assert service.store.get_run(job["id"])["status"] == "failed"
    finally:
        service.shutdown()


def test_a_slow_step_that_answers_the_stop_saves_and_ends_stopped_with_the_note(
    settings: Settings, model: Path
) -> None:
    service = _service(settings, fakes.steps_then_slow_step_saving_on_stop)
    try:
        job = service.submit(_cfg(model))
        snap = _final(service, job["id"])
        assert snap["status"] == "stopped" and snap["stop_requested"] == {"save": True}, snap
        assert "stopped as hung" in snap["error"], snap["error"]
    finally:
        service.shutdown()


def test_announced_work_and_the_phases_before_the_first_step_are_not_watched(
    settings: Settings, model: Path
) -> None:
    service = _service(settings, fakes.steps_with_a_silent_sample_round)
    try:
        job = service.submit(_cfg(model, sample_prompts=["x"], sample_every=2, sample_steps=1))
        snap = _final(service, job["id"])
        assert snap["status"] == "completed" and snap["error"] is None, snap
    finally:
        service.shutdown()
    service = _service(settings, fakes.hang_ignoring_stop)  # 'loading' for ever: no step yet
    try:
        job = service.submit(_cfg(model, output_name="loading"))
        until(lambda: service.job(job["id"])["phase"] is not None, WORKER_START_S, "child up and 'loading'")
        time.sleep(WATCH["hang_min_s"] * 3)
        assert service.job(job["id"])["status"] == "preparing"
    finally:
        service.shutdown()
