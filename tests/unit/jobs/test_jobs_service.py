"""The job service's edges, with real spawned children running misbehaving worker targets."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import jobs_fake_workers as fakes
import pytest

from lorastudio.errors import ConfigError, JobActive, NotFound
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.process import WorkerTarget
from lorastudio.jobs.service import JobService, Timeouts
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from zygote import ANSWER_S

FINAL = {"completed", "stopped", "cancelled", "failed", "interrupted"}


def _service(settings: Settings, target: WorkerTarget, **timeouts: float) -> JobService:
    store = RunStore.open(settings.db_path)
    return JobService(
        settings, store, GpuArbiter(), worker_target=target, timeouts=Timeouts(**timeouts)
    ).start()


def _cfg(model: Path, name: str = "run") -> dict:
    return {
        "family": "flux",
        "base_model": str(model),
        "data_dir": "shapes",
        "resolution": 32,
        "steps": 3,
        "output_name": name,
    }


def _wait(service: JobService, job_id: str, statuses: set[str], timeout: float = 30.0) -> dict:
    """The job's snapshot once its status is one of `statuses`, `timeout` s after its worker
    started at the most: the wait for that start is bounded apart, by the zygote's (the first
    worker of a test process waits for its imports, tests/zygote.py: over 30 s at load 8-17,
    where a 30-s bound over both failed "still queued", RELIABILITY 1482)."""
    start_by = time.monotonic() + ANSWER_S
    while service.job(job_id)["status"] == "queued" and "queued" not in statuses:
        assert time.monotonic() < start_by, f"job {job_id} still queued after {ANSWER_S:.0f}s"
        time.sleep(0.02)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = service.job(job_id)
        if snap["status"] in statuses:
            return snap
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} still {service.job(job_id)['status']} after {timeout}s")


@pytest.fixture
def model(tiny_model: Callable[[str], Path], shapes: Path) -> Path:
    return tiny_model("flux")


def test_a_worker_that_dies_fails_the_job_within_2s_and_frees_the_gpu(
    settings: Settings, model: Path
) -> None:
    service = _service(settings, fakes.die_after_one_step)
    try:
        job = service.submit(_cfg(model))
        _wait(service, job["id"], {"running"})
        t0 = time.monotonic()
        snap = _wait(service, job["id"], FINAL, timeout=5)
        assert time.monotonic() - t0 < 2.0
        assert snap["status"] == "failed"
        assert snap["error"] == "worker exited unexpectedly (code 7)"
        assert service.store.get_run(job["id"])["status"] == "failed"
        assert service.arbiter.training_job is None  # freed together with the final status
        assert service.status()["busy"] is False
    finally:
        service.shutdown()


def test_a_hung_worker_is_terminated_then_killed_after_a_stop(settings: Settings, model: Path) -> None:
    service = _service(settings, fakes.hang_ignoring_stop, stop_grace_s=0.5, kill_grace_s=0.5)
    try:
        job = service.submit(_cfg(model))
        snap = _wait(service, job["id"], {"preparing"})
        deadline = time.monotonic() + 20
        while service.job(job["id"])["phase"] is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the child is up and 'loading'
        pid = service.job(job["id"])["pid"]
        stopping = service.stop(save=True)
        assert stopping["status"] == "stopping" and stopping["stop_requested"] == {"save": True}
        snap = _wait(service, job["id"], FINAL, timeout=10)
        assert snap["status"] == "stopped"
        assert "terminated" in snap["error"] and snap["lora_path"] is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        with pytest.raises(NotFound):
            service.stop(save=False)  # nothing left to stop
    finally:
        service.shutdown()


def test_non_finite_numbers_become_null_and_are_skipped_in_history(settings: Settings, model: Path) -> None:
    service = _service(settings, fakes.emit_non_finite)
    try:
        job = service.submit(_cfg(model))
        snap = _wait(service, job["id"], FINAL)
        assert snap["status"] == "completed"
        status = service.status()
        json.dumps(status, allow_nan=False)
        json.dumps(service.events_after(0), allow_nan=False)
        nan_step = next(e for _, e in service.events_after(0) if e["type"] == "progress" and e["step"] == 1)
        assert nan_step["loss"] is None and nan_step["lr"] is None and nan_step["grad_norm"] is None
        assert [p["step"] for p in snap["metrics"]] == [2]
        assert [m["step"] for m in service.store.get_run(job["id"])["metrics"]] == [2]
        assert [p["step"] for p in service.status(since=2)["job"]["metrics"]] == []
    finally:
        service.shutdown()


def test_an_epoch_runs_total_is_unknown_until_its_progress_says_it(settings: Settings, model: Path) -> None:
    """num_epochs ignores `steps`: the record holds no total until the worker's progress gives
    the run's length (3 here), never the ignored setting."""
    service = _service(settings, fakes.emit_non_finite)
    try:
        job = service.submit({**_cfg(model), "steps": 500, "num_epochs": 2})
        _wait(service, job["id"], FINAL)
        assert service.store.get_run(job["id"])["total_steps"] == 3
        service.store.create_run("other", "o", "flux", {"steps": 500, "num_epochs": 2}, "2026-01-01T00:00:00")
        assert service.store.get_run("other")["total_steps"] is None
    finally:
        service.shutdown()


def test_events_of_a_superseded_worker_are_ignored(settings: Settings, model: Path) -> None:
    service = _service(settings, fakes.emit_as_superseded_worker)
    try:
        job = service.submit(_cfg(model))
        snap = _wait(service, job["id"], FINAL)
        assert snap["status"] == "completed" and snap["error"] is None
        assert service.ignored_events == 2
    finally:
        service.shutdown()


def test_the_worker_gets_no_secrets(settings: Settings, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even started by a process that kept its secrets (this test process), the worker holds
    none: a local base model needs no hub token either."""
    monkeypatch.setenv("LORASTUDIO_API_TOKEN", "s3cret")
    monkeypatch.setenv("MY_SECRET_KEY", "x")
    monkeypatch.setenv("GITHUB_TOKEN", "y")
    monkeypatch.setenv("HF_TOKEN", "hf")
    service = _service(settings.model_copy(update={"api_token": "s3cret"}), fakes.report_environment)
    try:
        job = service.submit(_cfg(model))
        snap = _wait(service, job["id"], FINAL)
        assert snap["error"] == "env= settings_token=None"
    finally:
        service.shutdown()


def test_the_studio_hub_token_reaches_a_hub_run_only_in_memory(
    settings: Settings, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose base model is a hub id gets the studio's hub token from its settings (not
    its environment), held in memory for its hub calls, never as HF_TOKEN (RELIABILITY 1120)."""
    from pydantic import SecretStr

    from lorastudio import hub_token
    from lorastudio.jobs.childenv import give_hub_token

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", "hf_studio")
    service = _service(settings, fakes.report_environment)
    try:
        job = service.submit(_cfg(model))
        snap = _wait(service, job["id"], FINAL)
        assert snap["error"] == "env= settings_token=None"  # a local model: no token needed
        assert "hf_studio" not in json.dumps(snap)
    finally:
        service.shutdown()
    monkeypatch.setattr(os, "environ", dict(os.environ))  # this test process's own stays as it is
    monkeypatch.setattr(hub_token, "_held", None)
    with_token = settings.model_copy(update={"hf_token": SecretStr("hf_studio")})
    assert give_hub_token(with_token, "owner/gated-model") and hub_token.hub_kwargs() == {
        "token": "hf_studio"
    }
    assert "hf_studio" not in os.environ.values() and "LORASTUDIO_HF_TOKEN" not in os.environ
    assert not give_hub_token(with_token, str(model)) and hub_token.hub_kwargs() == {}


def test_queue_is_fifo_and_refusals_change_nothing(settings: Settings, model: Path) -> None:
    service = _service(settings, fakes.hang_ignoring_stop, stop_grace_s=0.2, kill_grace_s=0.2)
    try:
        first = service.submit(_cfg(model, "one"))
        second = service.submit(_cfg(model, "two"))  # queued behind the first
        with pytest.raises(JobActive):
            service.submit(_cfg(model, "three"), queue=False)
        with pytest.raises(ConfigError):
            service.submit(_cfg(model, "two"))  # output name of a queued job
        with pytest.raises(ConfigError):
            service.submit({**_cfg(model, "four"), "steps": -1})
        assert [r["output_name"] for r in service.store.list_runs()] == ["two", "one"]
        assert [q["id"] for q in service.status()["queue"]] == [second["id"]]
        cancelled = service.stop(save=False, job_id=second["id"])  # cancel the queued one
        assert cancelled["status"] == "cancelled"  # never started: not "stopped"
        assert service.store.get_run(second["id"])["status"] == "cancelled"
        _wait(service, first["id"], {"preparing"})
        service.stop(save=False)
        assert _wait(service, first["id"], FINAL)["status"] == "stopped"
        assert service.status()["queue"] == []
    finally:
        service.shutdown()


def _process_state(pid: int) -> str:
    """The kernel's state letter of `pid` ("Z": exited, not yet reaped; "gone": no process)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except FileNotFoundError:
        return "gone"
    raise AssertionError(f"no State line for pid {pid}")


def test_the_gpu_is_free_for_generation_once_the_job_is_final_while_its_worker_exits(
    settings: Settings, model: Path
) -> None:
    service = _service(settings, fakes.complete_then_linger)
    try:
        first = service.submit(_cfg(model, "one"))
        snap = _wait(service, first["id"], FINAL)
        final_at = time.monotonic()
        assert snap["status"] == "completed"
        # The reservation went with the final status, not with the process.
        assert service.arbiter.training_job is None
        with service.arbiter.generation():
            assert _process_state(snap["pid"]) not in {"Z", "gone"}  # the worker is still exiting
        assert service.status()["busy"] is False
        # A new job is accepted at once (queue=False) but waits for the old process to be gone.
        second = service.submit(_cfg(model, "two"), queue=False)
        assert service.job(second["id"])["status"] == "queued"
        started = _wait(service, second["id"], {"preparing", "running", "completed"})
        waited = time.monotonic() - final_at
        assert _process_state(snap["pid"]) == "gone"
        assert waited > fakes.LINGER_S - 0.5, f"the second job started {waited:.2f}s after the first ended"
        assert started["pid"] != snap["pid"]
        assert _wait(service, second["id"], FINAL)["status"] == "completed"
    finally:
        service.shutdown()
