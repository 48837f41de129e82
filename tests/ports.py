"""Loopback ports for the servers the tests start as processes.

A port found free (bound to 0, then closed) and bound later by a server process can be taken in
between: by another pytest-xdist worker's server, or as the ephemeral port of any outgoing
connection. The server then fails to bind and exits, and a poll of the port may even be answered
by whichever server holds it. `start_listening` starts a server on a free port and returns once
that process itself listens there (psutil), starting it again on another port when it exited
before listening.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

import psutil

ATTEMPTS = 3


def free_port() -> int:
    """A loopback TCP port free now (another process may take it before it is bound)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself has a TCP socket listening on `port`."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections)


def wait_listening(proc: subprocess.Popen, port: int, timeout: float = 60.0) -> bool:
    """Wait until `proc` listens on `port` (True) or has exited (False). AssertionError after
    `timeout` s of neither."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if listens(proc.pid, port):
            return True
        assert time.monotonic() < deadline, (
            f"the server (pid {proc.pid}) did not listen on port {port} in {timeout} s"
        )
        time.sleep(0.05)
    return False


def start_listening(
    start: Callable[[int], subprocess.Popen], timeout: float = 60.0
) -> tuple[subprocess.Popen, int]:
    """(process, port): `start(port)`'s process once it listens on a free port; one that exits
    before listening (its port was taken meanwhile) is started again on another, ATTEMPTS times
    in all. AssertionError when the last one exits too (its code named)."""
    for _ in range(ATTEMPTS):
        port = free_port()
        proc = start(port)
        if wait_listening(proc, port, timeout):
            return proc, port
    raise AssertionError(
        f"the server exited before listening, {ATTEMPTS} times (last code {proc.returncode})"
    )
