"""On a GPU host: the server's GPU facts (the gpu_probe child's answer, GET /api/info's `host`)
and whether its standby training worker, once ready, holds a CUDA context (nvidia-smi's compute
processes; RELIABILITY's known problem "the standby training worker's no CUDA before its job").

    python -m bench.standby_gpu_check [--home DIR] [--wait-s 240]

Starts `lorastudio serve` on a free port with a new studio home, asks /api/info, waits for the
console's "standby worker N ready" line, lists nvidia-smi's compute processes, stops the server.
Prints one JSON line: host, seconds to the probe's answer and to the standby's ready line, the
standby's pid and the compute processes (a CUDA context of the standby would be among them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.e2e_api import _free_port, gpu_processes, wait_for_standby


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--wait-s", type=float, default=240.0)
    opts = parser.parse_args()
    home = opts.home or Path(tempfile.mkdtemp(prefix="standby-gpu-"))
    log = home / "serve.log"
    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = {**os.environ, "LORASTUDIO_HOME": str(home), "LORASTUDIO_STANDBY_WORKER": "1"}
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lorastudio.cli", "serve", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    row: dict = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120.0) as client:
            while True:
                try:
                    info = client.get("/api/info")
                    break
                except httpx.TransportError:
                    if proc.poll() is not None or time.monotonic() - started > 120:
                        raise RuntimeError(f"the server did not answer; see {log}") from None
                    time.sleep(0.2)
            row["info_answered_s"] = round(time.monotonic() - started, 1)
            row["host"] = info.json().get("host")
        ready = wait_for_standby(log, opts.wait_s)
        row["standby_ready_s"] = None if ready is None else round(time.monotonic() - started, 1)
        text = log.read_text(errors="replace")
        found = re.search(r"standby worker (\d+) ready", text)
        row["standby_pid"] = int(found[1]) if found else None
        row["gpu_processes"] = gpu_processes()
        row["standby_holds_cuda"] = any(
            line.split(",")[0].strip() == str(row["standby_pid"]) for line in row["gpu_processes"]
        )
        row["server_lines"] = [line for line in text.splitlines() if "lorastudio." in line][:8]
    finally:
        proc.terminate()
        proc.wait(60)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
