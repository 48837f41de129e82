"""A rank killed -9 is named as the cause even when the rank whose collective its death broke
reports first (RELIABILITY 396): the kernel closes a dying process's sockets inside its exit,
before it is a zombie, so the launcher counts a rank whose task flags hold PF_EXITING as dead
(processes.process_ending), where process_alive still found it running (1 kill in 4 was blamed
on the surviving rank's "Connection reset by peer", tests/reliability/test_rank_death.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lorastudio import processes
from lorastudio.jobs.launcher import TorchrunWorker
from lorastudio.processes import PF_EXITING, process_alive, process_ending
from polling import until


def _stat_with_flags(pid: int, flags: int) -> str:
    """This process's real /proc stat line with its task flags (field 9) replaced."""
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    head, tail = stat[: stat.rindex(")") + 2], stat[stat.rindex(")") + 2 :].split(" ")
    tail[6] = str(flags)
    return head + " ".join(tail)


def test_process_ending_reads_exit_zombie_and_gone() -> None:
    me = os.getpid()
    assert not process_ending(me) and process_alive(me)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    until(
        lambda: Path(f"/proc/{child.pid}/stat").read_text(encoding="utf-8").split(") ")[1][0] == "Z",
        30,
        "the child a zombie",
    )
    assert process_ending(child.pid) and not process_alive(child.pid)  # a zombie, not yet reaped
    child.wait()
    assert process_ending(child.pid)  # gone


def test_a_process_inside_its_exit_is_ending(monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()
    flags = int(Path(f"/proc/{me}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[6])
    monkeypatch.setattr(processes, "_proc_stat", lambda pid: _stat_with_flags(pid, flags | PF_EXITING))
    assert process_ending(me)
    assert process_alive(me)  # still "running" by its state: why the launcher asks process_ending


def test_the_launcher_blames_the_exiting_rank_not_the_one_that_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 reports its broken collective while rank 0 (here: this process, faked as inside
    its exit) has not become a zombie yet: rank 0 is the job's first failure."""
    me = os.getpid()
    flags = int(Path(f"/proc/{me}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[6])
    monkeypatch.setattr(processes, "_proc_stat", lambda pid: _stat_with_flags(pid, flags | PF_EXITING))
    worker = object.__new__(TorchrunWorker)  # only the rank bookkeeping is exercised
    worker._lock = threading.Lock()
    worker._ranks = {0: me, 1: me + 1}
    worker._done = {}
    worker._first = None
    worker._agent = None
    worker._receive(1, {"kind": "done", "code": 1, "message": "RuntimeError: gloo: Connection reset by peer"})
    assert worker._first == ("lost", 0)
