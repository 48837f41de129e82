"""The API mode of bench/e2e_run.py: a real `lorastudio serve` process, one run through the runs
API, its event stream recorded with arrival times.

`api_run(home, config, log)`: starts the server as a subprocess (a free loopback port, the studio
home `home`), opens GET /api/train/events?after=0 (a fresh server's log holds nothing older),
POSTs /api/train/start {"config": config}, and records every engine event of that job until its
complete / error event (or the timeout). Returns (the timed typed events, the seconds from the
POST to the end, the job id). The server is stopped (SIGTERM, then SIGKILL) and reaped in every
case.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

SERVER_START_S = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Stream(threading.Thread):
    """Reads the server-sent events into `self.items` as (monotonic arrival time, event dict)."""

    def __init__(self, url: str) -> None:
        super().__init__(name="e2e-sse", daemon=True)
        self.url = url
        self.items: list[tuple[float, dict[str, Any]]] = []
        self.connected = threading.Event()
        self.changed = threading.Condition()
        self.failure: str | None = None
        self._stop = False

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10.0, read=None)) as client,
                client.stream("GET", self.url, params={"after": 0}) as response,
            ):
                response.raise_for_status()
                self.connected.set()
                for line in response.iter_lines():
                    if self._stop:
                        return
                    if line.startswith("data: "):
                        with self.changed:
                            self.items.append((time.monotonic(), json.loads(line[6:])))
                            self.changed.notify_all()
        except httpx.HTTPError as err:
            self.failure = f"event stream: {err}"
        finally:
            self.connected.set()
            with self.changed:
                self.changed.notify_all()

    def close(self) -> None:
        self._stop = True


def _wait_up(client: httpx.Client, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"lorastudio serve exited with {proc.returncode}; see {log}")
        try:
            if client.get("/api/info").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"lorastudio serve did not answer in {SERVER_START_S:.0f} s; see {log}")


def api_run(
    home: Path,
    config: dict[str, Any],
    log: Path,
    timeout_s: float = 3600.0,
    env: dict[str, str] | None = None,
    before_post: Callable[[int], None] | None = None,
    notes: dict[str, Any] | None = None,
) -> tuple[list[tuple[float, Any]], float, str]:
    """See the module docstring. `env`: variables set for the server besides the home;
    `before_post(server pid)` runs once the server answers, before the POST (a wait for its
    standby worker, bench/standby_start.py). `notes`, when given, receives "host": the "host" of the
    server's GET /api/info answer (its GPU facts, from the gpu_probe child). Raises RuntimeError when the server does not start, the start is
    refused (naming the answer) or the run does not end within `timeout_s`."""
    from pydantic import ValidationError

    from lorastudio.training.events import parse_event

    port = _free_port()
    env = {**os.environ, **(env or {}), "LORASTUDIO_HOME": str(home)}
    cmd = [sys.executable, "-m", "lorastudio.cli", "serve", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    stream = _Stream(f"{base}/api/train/events")
    try:
        with httpx.Client(base_url=base, timeout=60.0) as client:
            _wait_up(client, proc, log)
            if notes is not None:
                notes["host"] = client.get("/api/info").json().get("host")
            if before_post is not None:
                before_post(proc.pid)
            stream.start()
            stream.connected.wait(30)
            if stream.failure:
                raise RuntimeError(stream.failure)
            t0 = time.monotonic()
            answer = client.post("/api/train/start", json={"config": config, "queue": False})
            if answer.status_code != 201:
                raise RuntimeError(f"start refused ({answer.status_code}): {answer.text[:2000]}")
            job = answer.json()["id"]
            end = _follow(stream, job, t0 + timeout_s)
        timed = []
        for arrived, data in stream.items:
            if data.get("job_id") != job or data.get("type") == "status":
                continue
            fields = {k: v for k, v in data.items() if k != "job_id"}
            try:
                timed.append((arrived - t0, parse_event(fields)))
            except ValidationError:
                continue  # the job service's own events (busy, ...): not the engine's
        return timed, end - t0, job
    finally:
        stream.close()
        end_server(proc)


def end_server(proc: subprocess.Popen[bytes], grace_s: float = 60.0) -> None:
    """Stop a `lorastudio serve` child: SIGTERM (it stops its workers), then SIGKILL after
    `grace_s`; a no-op when it already ended."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def wait_for_standby(log: Path, timeout_s: float = 180.0) -> float | None:
    """Seconds until the server's log says its standby worker is ready (jobs/standby.py), None
    when it did not within `timeout_s` (standby off, or its imports failed: the log says)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        if any("standby worker" in line and " ready" in line for line in text.splitlines()):
            return time.monotonic() - started
        time.sleep(0.2)
    return None


def gpu_processes() -> list[str]:
    """nvidia-smi's compute processes ("pid, used memory"), [] without nvidia-smi: a standby
    worker that has not touched CUDA is not among them."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _follow(stream: _Stream, job: str, deadline: float) -> float:
    """Wait for the job's complete / error event; returns its arrival time (monotonic)."""
    seen = 0
    with stream.changed:
        while True:
            for arrived, data in stream.items[seen:]:
                if data.get("job_id") == job and data.get("type") in ("complete", "error"):
                    return arrived
            seen = len(stream.items)
            if stream.failure:
                raise RuntimeError(stream.failure)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"job {job} did not end in time")
            stream.changed.wait(min(left, 5.0))
