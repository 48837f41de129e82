"""`lorastudio serve` as PID 1 of its own PID namespace, as in a container started without an init
(`unshare --pid --fork`: needs root and util-linux). The kernel delivers a signal to a namespace's
init only where it has a handler: a SIGTERM from outside (`docker stop`) must end the server, and
the server says it runs without an init (RELIABILITY session 34 containers audit). Slow: a real
server start (~10-20 s on the loaded 2-core host)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import lorastudio

SRC = str(Path(lorastudio.__file__).resolve().parents[1])

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="a PID namespace needs root and unshare",
    ),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _child_of(pid: int) -> int | None:
    """The first child of process `pid` (unshare's forked child: the namespace's PID 1)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text(encoding="utf-8").split()
        if children:
            return int(children[0])
    return None


def test_serve_as_pid_1_ends_on_sigterm_and_says_it_has_no_init(tmp_path: Path) -> None:
    port, log = _free_port(), tmp_path / "serve.log"
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "LORASTUDIO_HOME": str(tmp_path / "home"),
        "LORASTUDIO_STANDBY_WORKER": "0",
    }
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "lorastudio", "serve"]
    with open(log, "wb") as out:
        outer = subprocess.Popen([*cmd, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert outer.poll() is None and time.monotonic() < deadline, log.read_text(encoding="utf-8")
            time.sleep(0.2)
        server = _child_of(outer.pid)
        assert server is not None
        os.kill(server, signal.SIGTERM)  # from outside its namespace, as `docker stop` sends it
        assert outer.wait(20) == 0
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait(10)
    text = log.read_text(encoding="utf-8")
    assert "note: the server is PID 1 with no init" in text and "--init" in text
    assert "Finished server process [1]" in text
