"""The preloaded zygote's workers (tests/zygote.py) are what a spawned worker is to the job
service: a child of this process (its parent pid, its exit code and death signal reaped here),
with this process's environment, working folder and output now, and the job's pickled args;
a real spawn where the environment differs in what the zygote's imports read."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

import zygote
from lorastudio.processes import spawn_context


def _report(queue, path: str, code: int) -> None:
    """The child's facts, then exit `code`."""
    print("worker says hello", flush=True)
    queue.put(
        {
            "ppid": os.getppid(),
            "home": os.environ.get("LORASTUDIO_HOME"),
            "cwd": os.getcwd(),
            "torch": "torch" in sys.modules,
            "path": path,
        }
    )
    sys.exit(code)


def _wait_forever(event) -> None:
    event.set()
    signal.pause()


def test_a_worker_is_a_child_of_this_process_with_its_environment_now(
    tmp_path: Path, studio_home: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    ctx = spawn_context()
    assert isinstance(ctx, zygote.ZygoteContext)
    queue = ctx.Queue()
    proc = ctx.Process(target=_report, args=(queue, "given", 7))
    proc.start()
    facts = queue.get(timeout=120)
    proc.join(60)
    assert proc.exitcode == 7
    assert facts == {
        "ppid": os.getpid(),
        "home": str(studio_home),
        "cwd": str(tmp_path),
        "torch": True,
        "path": "given",
    }
    assert "worker says hello" in capfd.readouterr().out  # this test's output, not the zygote's first one's
    with pytest.raises(ChildProcessError):
        os.waitpid(proc.pid, os.WNOHANG)  # reaped here, by join: it was this process's child


def test_a_killed_worker_reads_as_killed_and_its_sentinel_fires() -> None:
    ctx = spawn_context()
    started = ctx.Event()
    proc = ctx.Process(target=_wait_forever, args=(started,))
    proc.start()
    assert started.wait(120)
    assert proc.is_alive()
    os.kill(proc.pid, signal.SIGKILL)
    from multiprocessing.connection import wait

    assert wait([proc.sentinel], 30) == [proc.sentinel]
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL


def test_an_environment_the_imports_read_gets_a_spawned_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = spawn_context()
    queue = ctx.Queue()
    first = ctx.Process(target=_report, args=(queue, "zygote", 0))
    first.start()  # the zygote runs from here on
    queue.get(timeout=120)
    first.join(60)
    assert type(first._popen) is zygote.ZygotePopen
    monkeypatch.setenv("LORASTUDIO_API_TOKEN", "a secret a test checks is not in a worker's environ")
    assert not zygote.ZYGOTE.fits(os.environ)
    monkeypatch.delenv("LORASTUDIO_API_TOKEN")
    for name in ("HF_ENDPOINT", "HF_HUB_CACHE"):  # the fake hub's (tests/api/test_api_models.py)
        with monkeypatch.context() as hub:
            hub.setenv(name, "http://127.0.0.1:9/elsewhere")
            assert not zygote.ZYGOTE.fits(os.environ), name
    monkeypatch.setenv("HF_HOME", "/elsewhere")
    assert not zygote.ZYGOTE.fits(os.environ)
    spawned = ctx.Process(target=_report, args=(queue, "spawned", 0))
    spawned.start()
    facts = queue.get(timeout=120)
    spawned.join(60)
    assert type(spawned._popen) is not zygote.ZygotePopen
    assert facts["path"] == "spawned" and facts["ppid"] == os.getpid() and not facts["torch"]
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("LORASTUDIO_HOME", "/another/home")
    assert zygote.ZYGOTE.fits(os.environ)


@pytest.mark.spawned_workers
def test_a_test_marked_spawned_workers_gets_multiprocessings_spawn() -> None:
    assert not isinstance(spawn_context(), zygote.ZygoteContext)
