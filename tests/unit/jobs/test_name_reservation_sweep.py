"""A killed namer's name reservation (`outputs/.<name>.reserved`, name_reserve.py, fix 1094) is
removed where the studio sweeps the leftovers of outputs/ (a server start, `lorastudio train`'s
start), never one a live holder locks, in another thread or process (RELIABILITY 1127)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lorastudio.jobs.leftovers import start_leftover_cleanup
from lorastudio.name_reserve import NameHold, reservation_path, reserve_output_name, sweep_stale_reservations
from lorastudio.settings import Settings

_HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)  # a namer holding its reservation as name_reserve does (stdlib only: no torch import)


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _hold_in_process(path: Path, started: list[subprocess.Popen[str]], killed: bool) -> None:
    """A process holding reservation `path` (its lock taken before this returns), SIGKILLed when
    `killed`: its file stays, its lock gone with it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    started.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_server_start_and_a_cli_run_remove_a_killed_holders_reservation_never_a_live_one(
    settings: Settings, holders: list[subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from lorastudio.cli import train_cmd

    outputs = settings.outputs_dir
    dead, process, thread = (reservation_path(outputs, f"flux-2026120{n}-000000") for n in (1, 2, 3))
    _hold_in_process(dead, holders, killed=True)
    _hold_in_process(process, holders, killed=False)
    held: list[object] = []
    namer = threading.Thread(target=lambda: held.append(reserve_output_name(thread.name[1:-9], outputs)))
    namer.start()
    namer.join()
    kept = settings.home / "kept"
    kept.write_text("")
    (outputs / ".flux-x.reserved").symlink_to(kept)  # a link is no reservation: kept, not followed
    assert dead.exists() and process.exists() and thread.exists()

    cleanup = start_leftover_cleanup(settings)  # a server start (with the home lock)
    if cleanup is not None:
        cleanup.join()
    assert not dead.exists()  # the old code left it until a later namer took that very name
    assert process.exists() and thread.exists()  # live holders': kept
    assert (outputs / ".flux-x.reserved").is_symlink() and kept.exists()

    _hold_in_process(dead, holders, killed=True)  # killed again, then a `lorastudio train` starts
    train_cmd._remove_abandoned_runs()
    assert not dead.exists() and process.exists() and thread.exists()
    assert f"removed the name reservation a killed run left: {dead}" in capsys.readouterr().err
    held[0].release()  # type: ignore[attr-defined]
    assert not thread.exists()


def test_a_sweep_beside_namers_never_takes_a_held_name(settings: Settings) -> None:
    """Three namers of one name and a sweeper behind a barrier, 150 rounds: three names each
    round, each hold's file still the one it locked (the sweeper removed no live one), and a
    file the sweeper took from under a namer's open is made again by that namer."""
    outputs = settings.outputs_dir

    def name_one(start: threading.Barrier, holds: list[NameHold]) -> None:
        start.wait()
        holds.append(reserve_output_name("flux-20261207-000000", outputs))

    def sweep(start: threading.Barrier, holds: list[NameHold]) -> None:
        start.wait()
        sweep_stale_reservations(outputs)

    for _ in range(150):
        start, holds = threading.Barrier(4), []
        threads = [
            threading.Thread(target=f, args=(start, holds)) for f in (name_one, name_one, name_one, sweep)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({h.name for h in holds}) == 3
        for hold in holds:
            assert hold.fd is not None and hold.path is not None
            assert os.path.samestat(os.fstat(hold.fd), os.stat(hold.path))
        for hold in holds:
            hold.release()
    assert not list(outputs.iterdir())
