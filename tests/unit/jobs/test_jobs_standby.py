"""The standby training worker (jobs/standby.py) with the real worker and the tiny FLUX.1: a job
is handed the waiting process (its pid is the job's), runs to the same final loss as a fresh
process, a new standby appears after; a standby killed while waiting is replaced; the shutdown
leaves no process; LORASTUDIO_STANDBY_WORKER=0 spawns per job."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.polling import until

from lorastudio.jobs import standby
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.standby import spawn_fingerprint
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

pytestmark = pytest.mark.spawned_workers  # the standby is the product's own preloaded worker

FINAL = {"completed", "stopped", "cancelled", "failed", "interrupted"}


def _alive(pid: int) -> bool:
    """The process exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _service(settings: Settings, standby: bool | None = None) -> JobService:
    return JobService(settings, RunStore.open(settings.db_path), GpuArbiter(), standby=standby).start()


def _keeper(service: JobService):  # the service's StandbyKeeper
    assert service._standby is not None
    return service._standby


def _ready_standby(service: JobService, timeout: float = 60.0) -> int:
    """The pid of the service's standby once it said it is ready (its imports done)."""
    keeper = _keeper(service)

    def ready() -> int | None:
        with keeper._lock:
            standby = keeper._standby
            return standby.pid if standby is not None and standby.alive() and standby.ready_s else None

    return int(until(ready, timeout, "ready standby worker"))  # type: ignore[arg-type]


def _run(service: JobService, model: Path, name: str) -> dict:
    job = service.submit(
        {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": 32, "steps": 3,
         "output_name": name, "seed": 7}
    )  # fmt: skip
    return until(lambda: (s := service.job(job["id"]))["status"] in FINAL and s, 90, f"end of {name}")  # type: ignore[return-value]


def _final_loss(service: JobService, job_id: str) -> float:
    """The loss of the run's last step, as the run store keeps it."""
    return float(service.store.get_run(job_id)["metrics"][-1]["loss"])


@pytest.fixture
def model(tiny_model: Callable[[str], Path], shapes: Path) -> Path:
    return tiny_model("flux")


def test_a_job_is_handed_the_standby_and_ends_as_with_a_fresh_process(
    settings: Settings, model: Path
) -> None:
    service = _service(settings, standby=True)  # its standby imports while the fresh run goes
    try:
        waiting = int(until(lambda: _keeper(service).current_pid, 30, "standby"))  # type: ignore[arg-type]
        fresh = _service(settings.model_copy(update={"standby_worker": False}))
        try:
            assert fresh._standby is None  # LORASTUDIO_STANDBY_WORKER=0: one spawn per job, as before
            plain = _run(fresh, model, "fresh")
            plain_loss = _final_loss(fresh, plain["id"])
        finally:
            fresh.shutdown()
        assert plain["status"] == "completed", plain["error"]
        handed = _run(service, model, "handed")
        assert handed["status"] == "completed", handed["error"]
        assert handed["pid"] == waiting  # the job ran in the process that waited
        until(lambda: not _alive(waiting), 15, "exit of the used standby")  # used once, never reused
        after = until(lambda: _keeper(service).current_pid, 30, "next standby")
        assert after != waiting
        assert _final_loss(service, handed["id"]) == plain_loss
    finally:
        service.shutdown()
    assert plain["steps_run"] == handed["steps_run"] == 3
    log = (settings.home / "logs" / f"{handed['id']}.log").read_text()
    assert "complete:" in log  # the run's own log, as a fresh worker's
    for text in (log, (settings.home / "logs" / f"{plain['id']}.log").read_text()):  # import_freeze.py
        frozen = re.search(r"imports frozen out of the garbage collector's passes: (\d+) objects", text)
        assert frozen is not None and int(frozen[1]) > 100_000, text[-2000:]
    assert not _alive(int(after))  # the shutdown ended the standby


def test_a_standby_killed_while_waiting_is_replaced_and_the_next_job_runs(
    settings: Settings, model: Path
) -> None:
    service = _service(settings, standby=True)
    try:
        first = int(until(lambda: _keeper(service).current_pid, 30, "standby"))  # type: ignore[arg-type]
        os.kill(first, signal.SIGKILL)
        second = int(
            until(lambda: (p := _keeper(service).current_pid) not in (None, first) and p, 30, "replacement")
        )  # type: ignore[arg-type]
        assert _keeper(service).spawned == 2
        job = _run(service, model, "after-kill")
        assert job["status"] == "completed", job["error"]
        assert job["pid"] == second
    finally:
        service.shutdown()
    assert not _alive(first) and not _alive(second)
    assert not [p for p in _children() if _alive(p)]  # no orphan, no process left


def test_a_changed_environment_gets_a_fresh_process(
    settings: Settings, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = _service(settings, standby=True)
    try:
        waiting = int(until(lambda: _keeper(service).current_pid, 30, "standby"))  # type: ignore[arg-type]
        before = spawn_fingerprint()
        monkeypatch.setenv("LORASTUDIO_MAX_JSON_MB", "5")  # a setting the standby was not spawned with
        assert spawn_fingerprint() != before
        job = _run(service, model, "changed-env")
        assert job["status"] == "completed", job
        assert job["pid"] != waiting
        until(lambda: not _alive(waiting), 15, "end of the unfit standby")
    finally:
        service.shutdown()


def _children() -> list[int]:
    """This process's child pids (Linux /proc), multiprocessing's resource tracker and the
    zygote of the other tests' workers (tests/zygote.py) aside."""
    from zygote import ZYGOTE

    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) != me or int(entry.name) == ZYGOTE.pid:
                continue
            if b"resource_tracker" not in (entry / "cmdline").read_bytes():  # multiprocessing's own
                found.append(int(entry.name))
    return found


def test_the_setting_reads_the_environment_and_defaults_on(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert Settings(home=studio_home).standby_worker is False  # the suite's conftest: 0
    monkeypatch.delenv("LORASTUDIO_STANDBY_WORKER")
    assert Settings(home=studio_home).standby_worker is True  # on by default
    service = JobService(
        Settings(home=studio_home).ensure_dirs(), RunStore.open(studio_home / "x.db"), GpuArbiter()
    )
    assert service._standby is not None  # not started: no process
    monkeypatch.setenv("LORASTUDIO_STANDBY_WORKER", "0")
    assert (
        JobService(Settings(home=studio_home), RunStore.open(studio_home / "y.db"), GpuArbiter())._standby
        is None
    )


def test_a_standby_whose_start_fails_is_ended_and_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A spawn that raised (EAGAIN or ENOMEM from the OS; multiprocessing's RuntimeError in a
    process still bootstrapping) was followed by end() on a process never started:
    multiprocessing's terminate() raised AttributeError, which killed the keeper's thread (no
    standby ever again) with a traceback (session 33 offlinedocs, fix 1155). Now it logs the
    failure and counts a death."""

    made = standby.StandbyProcess.__init__

    def refusing_start(self: standby.StandbyProcess, parent_pid: int) -> None:
        made(self, parent_pid)

        def refuse() -> None:
            raise OSError(11, "Resource temporarily unavailable")

        self.process.start = refuse  # its real spawn() calls it

    monkeypatch.setattr(standby.StandbyProcess, "__init__", refusing_start)
    keeper = standby.StandbyKeeper(may_spawn=lambda: True)
    with caplog.at_level("ERROR", logger=standby.log.name):
        keeper._spawn()  # the keeper thread's step; raised AttributeError before
    assert keeper._standby is None and keeper._deaths == 1 and keeper.spawned == 0
    assert "could not spawn a standby worker: [Errno 11]" in caplog.text, caplog.text
