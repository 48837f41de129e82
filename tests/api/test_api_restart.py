"""A server that dies mid-run: its worker dies with it, and the next server start marks the run
interrupted while keeping its record. The first server runs as a real `lorastudio serve`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import typer
from api_helpers import live_server, upload_folder, wait_status
from typer.testing import CliRunner

from lorastudio.api.app import create_app
from lorastudio.settings import Settings


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in fh)
    except FileNotFoundError:
        return False


def test_server_death_kills_the_worker_and_the_run_is_interrupted_on_restart(
    cli: typer.Typer, settings: Settings, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    port = _free_port()
    env = {**os.environ, "LORASTUDIO_HOME": str(settings.home)}
    cmd = [sys.executable, "-c", "from lorastudio.cli.app import main; main()", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert f"http://127.0.0.1:{port}/" in proc.stdout.readline()
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.get("/api/info").raise_for_status()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.1)
        assert upload_folder(client, "shapes", sample_dataset).status_code == 201
        started = client.post(
            "/api/train/start", json={"config": flux_config(output_name="live", steps=100_000)}
        )
        job_id = started.json()["id"]
        worker_pid = wait_status(client, job_id, {"running"})["pid"]
        client.close()
        proc.send_signal(signal.SIGKILL)  # the server dies without any cleanup
        proc.wait(10)
        deadline = time.monotonic() + 3
        while _alive(worker_pid):
            assert time.monotonic() < deadline, "the worker outlived its server"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    with live_server(create_app(settings)) as server:
        run = server.client.get(f"/api/runs/{job_id}").json()
        assert run["status"] == "interrupted"
        assert run["config"]["output_name"] == "live" and run["steps_run"] > 0
        assert [r["id"] for r in server.client.get("/api/runs").json()["runs"]] == [job_id]
        assert server.client.get("/api/train/status").json()["job"] is None

    shown = CliRunner().invoke(cli, ["runs", "show", job_id], env={"LORASTUDIO_HOME": str(settings.home)})
    assert shown.exit_code == 0 and "interrupted" in shown.output
    listed = CliRunner().invoke(cli, ["runs", "list"], env={"LORASTUDIO_HOME": str(settings.home)})
    assert listed.exit_code == 0 and job_id[:8] in listed.output
