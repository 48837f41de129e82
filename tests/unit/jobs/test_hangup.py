"""A terminal's hangup (SIGHUP to the whole process group of a terminal-launched `serve`) reaches
the server's workers and multiprocessing's resource tracker too: each must outlive it, so that the
server's own shutdown (it stops on SIGHUP as on Ctrl-C) decides what happens to a run. Before, a
worker died of it mid-step, nothing saved, and the tracker died ("process died unexpectedly", a
KeyError traceback per semaphore). The whole server: tests/reliability/test_terminal_interrupt.py
(slow, `hangup`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def _child(script: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_worker_outlives_the_terminals_hangup() -> None:
    done = _child(
        """
        import os, signal
        from lorastudio.jobs.worker import ignore_terminal_interrupt
        ignore_terminal_interrupt()
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGINT)
        print("alive")
        """
    )
    assert (done.returncode, done.stdout) == (0, "alive\n"), done.stderr[-2000:]


def test_the_resource_tracker_outlives_the_terminals_hangup() -> None:
    done = _child(
        """
        from multiprocessing import resource_tracker
        from lorastudio.api.app import serve  # noqa: F401 (the server's path: no torch)
        from lorastudio.processes import start_resource_tracker_deaf_to_hangup
        start_resource_tracker_deaf_to_hangup()
        tracker = resource_tracker._resource_tracker._pid  # started: its exec is done
        status = open(f"/proc/{tracker}/status").read()
        ignored = int(next(l.split()[1] for l in status.splitlines() if l.startswith("SigIgn:")), 16)
        print(bool(ignored & 1))  # bit 0: SIGHUP (1) ignored
        """
    )
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr[-2000:]
