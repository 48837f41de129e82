"""A generation worker that hangs is timed out (RELIABILITY.md fix 28): each phase (start, load,
generate) has an allowance derived from the request (jobs/worker_allowance.py); past it the
worker is stopped, SIGTERM then SIGKILL, the request gets GenerationTimedOut (504) naming what
timed out and after how long, and the next request starts a fresh worker. Real spawned workers
(generation_hang_workers.py) and the tiny FLUX.1 model."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from generation_hang_workers import (
    HANG_LOAD_PROMPT,
    HANG_PROMPT,
    hanging_generation_worker,
    silent_generation_worker,
)
from lorastudio.api.errors import status_code_of
from lorastudio.errors import GenerationTimedOut
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.worker_allowance import GenerationAllowance
from lorastudio.settings import Settings


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _request(tiny_model: Callable[[str], Path], prompt: str) -> GenerationRequest:
    return GenerationRequest(
        family="flux", base_model=str(tiny_model("flux")), prompt=prompt, steps=2, width=32, height=32
    )


def _timed_out(service: GenerationService, req: GenerationRequest) -> tuple[int, float, str]:
    """Run `req`, which must time out: (the worker's pid, seconds from its spawn to the error,
    the error's message)."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(service.generate, req)
        while service.worker_pid is None and not pending.done():
            time.sleep(0.01)
        pid, spawned = service.worker_pid, time.monotonic()
        with pytest.raises(GenerationTimedOut) as info:
            pending.result()
        seconds = time.monotonic() - spawned
    assert pid is not None and _gone(pid)
    assert service.worker_pid is None and service.loaded is None
    return pid, seconds, str(info.value)


def test_the_allowance_follows_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    allowance = GenerationAllowance()
    assert allowance.work_s(20, 1024, 1024) == pytest.approx(120 + 30 * 20 * 1.048576)
    assert allowance.work_s(2, 32, 32) == 120 + 30 * 2  # below a megapixel counts as one
    assert allowance.work_s(10, 2048, 2048, images=2) == pytest.approx(120 + 30 * 10 * 4.194304 * 2)
    slow = allowance.scaled(3.0)
    assert (slow.ready_s, slow.load_s, slow.work_s(1, 64, 64)) == (360.0, 5400.0, 3 * 150.0)
    assert slow.kill_grace_s == allowance.kill_grace_s
    scaled = GenerationService(Settings(worker_timeout_scale=0.5), GpuArbiter())
    try:
        assert scaled._allowance.load_s == 900.0
    finally:
        scaled.shutdown()
    assert status_code_of(GenerationTimedOut("x")) == 504
    monkeypatch.setenv("LORASTUDIO_WORKER_TIMEOUT_SCALE", "3")
    assert Settings().worker_timeout_scale == 3.0


def test_a_worker_that_never_says_ready_or_hangs_loading_is_stopped(
    studio_home: Path, tiny_model: Callable[[str], Path]
) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    silent = GenerationService(
        settings, GpuArbiter(), silent_generation_worker, GenerationAllowance(ready_s=2.0, kill_grace_s=0.5)
    )
    try:
        _, waited, message = _timed_out(silent, _request(tiny_model, "x"))
        assert message.startswith("the generation worker did not say it is ready within 2.0 s"), message
        assert "stopped as hung (SIGTERM); the next request starts a fresh worker" in message
    finally:
        silent.shutdown()
    hanging = GenerationService(
        settings, GpuArbiter(), hanging_generation_worker, GenerationAllowance(load_s=1.5, kill_grace_s=0.5)
    )
    try:
        _, loading, message = _timed_out(hanging, _request(tiny_model, f"{HANG_LOAD_PROMPT} a red circle"))
        assert message.startswith("the generation worker did not load the model within 1.5 s"), message
        assert "LORASTUDIO_WORKER_TIMEOUT_SCALE" in message
    finally:
        hanging.shutdown()
    assert [p.name for p in (settings.home / "gallery").iterdir()] == []  # no staging left
    print(
        f"timed out: never ready {waited:.2f} s after the spawn (2.0 s allowed), hung load {loading:.2f} s (1.5 s)"
    )


def test_a_worker_hung_while_generating_is_killed_and_the_next_request_gets_a_fresh_one(
    studio_home: Path, tiny_model: Callable[[str], Path]
) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    allowance = GenerationAllowance(load_s=300.0, fixed_s=3.0, step_s=0.25, kill_grace_s=0.5)
    service = GenerationService(settings, GpuArbiter(), hanging_generation_worker, allowance)
    try:
        hung_pid, waited, message = _timed_out(service, _request(tiny_model, f"{HANG_PROMPT} a red circle"))
        assert message.startswith("the generation worker did not finish 2 steps at 32x32 within 3.5 s"), (
            message
        )
        assert "stopped as hung (SIGKILL: SIGTERM was ignored for 0.5 s); the next" in message
        after = service.generate(_request(tiny_model, "a red circle"))  # a fresh worker
        assert Path(after["path"]).is_file() and service.worker_pid not in (None, hung_pid)
        assert service.loaded == (str(tiny_model("flux")), "flux", None)
    finally:
        service.shutdown()
    assert sorted(p.suffix for p in (settings.home / "gallery").iterdir()) == [".json", ".png"]
    print(
        f"timed out: hung generating {waited:.2f} s after the spawn (start + load + 3.5 s + 0.5 s SIGTERM grace)"
    )


def test_a_worker_that_cannot_be_spawned_is_a_503_and_the_next_request_spawns_afresh(
    studio_home: Path, tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spawn failing (no memory, no free pid) raised the OSError (a 500) and left the
    unstarted worker in place: the next request was sent to no process and waited out its
    allowance."""
    import errno
    from multiprocessing.context import SpawnProcess

    from lorastudio.errors import GenerationWorkerLost

    def no_fork(self: SpawnProcess) -> None:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    settings = Settings(home=studio_home).ensure_dirs()
    service = GenerationService(settings, GpuArbiter(), allowance=GenerationAllowance(ready_s=60.0))
    try:
        monkeypatch.setattr(SpawnProcess, "start", no_fork)
        with pytest.raises(GenerationWorkerLost, match="could not start the generation worker: .*Errno 11"):
            service.generate(_request(tiny_model, "a red circle"))
        assert service.worker_pid is None
        monkeypatch.undo()
        t0 = time.monotonic()
        done = service.generate(_request(tiny_model, "a red circle"))
        assert Path(done["path"]).is_file() and time.monotonic() - t0 < 60
    finally:
        service.shutdown()
