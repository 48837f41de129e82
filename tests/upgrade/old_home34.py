"""Build a studio home with the code of session 34's start (run with PYTHONPATH=<old tree>/src):
the session 33 fixture's home (tests/upgrade/old_home33.py: CLI runs finished, failed and killed,
server runs finished and stopped, an asynchronous generation, uploaded references, a caption
job), then a server of that code killed outright while it held the home (its lock file left with
its pid and port). `python old_home34.py HOME`; the summary goes to HOME/../old_home.json."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from old_home33 import build  # noqa: E402 (beside this file)


def _killed_server(home: Path) -> dict:
    """`lorastudio serve` of this code on `home`, killed (SIGKILL) once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "LORASTUDIO_HOME": str(home), "LORASTUDIO_STANDBY_WORKER": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorastudio.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    up = False
    for _ in range(240):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                up = True
                break
        except OSError:
            time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return {"port": port, "up": up, "lock": (home / "lorastudio.lock").read_text()}


if __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    out["killed_server"] = _killed_server(home)
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out["killed_server"]))
