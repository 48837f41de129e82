"""One server per studio home (jobs/homelock.py), with real processes: a second `lorastudio
serve` on a home whose server is live is refused naming the first's pid and port; a CLI
`lorastudio train` on it is refused too (train through the server); a kill -9 of the owner
frees the home at once (the kernel drops the flock)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from reliability_helpers import record_figure, serve_process

from lorastudio.jobs.homelock import LOCK_NAME
from lorastudio.settings import Settings

CLI = [sys.executable, "-c", "from lorastudio.cli.app import main; main()"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cli(settings: Settings, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LORASTUDIO_HOME": str(settings.home)}
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_second_server_and_a_cli_run_are_refused_while_a_server_owns_the_home(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict], tmp_path: Path
) -> None:
    with serve_process(settings) as (first, client):
        port = int(str(client.base_url).rsplit(":", 1)[1].strip("/"))
        holder = json.loads((settings.home / LOCK_NAME).read_text())
        assert holder == {"pid": first.pid, "port": port, "kind": "server", "epoch": holder["epoch"]}
        assert len(holder["epoch"]) == 32  # the home's epoch (RELIABILITY 1182)

        t0 = time.monotonic()
        second = _cli(settings, "serve", "--port", str(_free_port()))
        refused_s = time.monotonic() - t0
        assert second.returncode == 1, second.stdout + second.stderr  # README: could not (was 2)
        assert f"pid {first.pid}" in second.stderr and f"port {port}" in second.stderr, second.stderr
        assert "only one server" in second.stderr
        assert "serving on" not in second.stdout  # refused before it announced anything

        config = tmp_path / "run.json"
        config.write_text(json.dumps(flux_config(output_name="beside", steps=2)))
        train = _cli(settings, "train", str(config), "--device", "cpu")
        assert train.returncode == 1, train.stdout + train.stderr  # as datasets caption, delete, cache clear
        assert f"pid {first.pid}" in train.stderr and "/api/train/start" in train.stderr, train.stderr
        assert "LORASTUDIO_HOME" in train.stderr
        assert not (settings.outputs_dir / "beside").exists()
        assert client.get("/api/train/status").json()["job"] is None  # the server is untouched

        first.send_signal(signal.SIGKILL)  # the owner dies without any cleanup
        first.wait(10)
    with serve_process(settings) as (again, client):  # the kernel freed the lock with it
        assert client.get("/api/info").status_code == 200
        assert json.loads((settings.home / LOCK_NAME).read_text())["pid"] == again.pid
    record_figure("home_lock_second_server", {"refused_in_s": round(refused_s, 2)})
