"""The standby training worker (jobs/standby.py) of a real `lorastudio serve` leaves no orphan:
it dies with a server killed -9 (its parent-death signal, else its watchdog), and the server's
graceful shutdown (SIGTERM) ends it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from reliability_helpers import record_figure, serve_process, wait_for

from lorastudio.settings import Settings

STANDBY_ON = {"LORASTUDIO_STANDBY_WORKER": "1"}


def _children(pid: int) -> list[int]:
    """`pid`'s live child processes (Linux /proc), multiprocessing's resource tracker aside."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and b"resource_tracker" not in cmdline:
            found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_standby_dies_with_a_killed_server(settings: Settings) -> None:
    with serve_process(settings, env=STANDBY_ON) as (proc, _client):
        standby = wait_for(lambda: _children(proc.pid), 30, "the standby worker", poll=0.05)[0]
        time.sleep(0.5)  # past the bootstrap, its death signal armed (or its watchdog running)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed = time.monotonic()
        wait_for(lambda: _gone(standby), 5, "the standby's end after the server's death", poll=0.02)
        record_figure("standby_server_kill", {"standby_gone_s": round(time.monotonic() - killed, 3)})


def test_the_server_shutdown_ends_the_standby(settings: Settings) -> None:
    with serve_process(settings, env=STANDBY_ON) as (proc, _client):
        standby = wait_for(lambda: _children(proc.pid), 30, "the standby worker", poll=0.05)[0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert _gone(standby)  # ended by the shutdown, not left to the death signal
