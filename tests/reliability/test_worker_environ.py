"""No secret in a training worker's environment (jobs/childenv.py), read where an attacker on the
host would: /proc/PID/environ (fixed when the process starts, whatever it removes later) of the
live worker of a real `lorastudio serve` started with an API token, a hub token and other
secrets, and of every other process the server started (multiprocessing's resource tracker, the
standby worker that ran the job, and the next one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
from reliability_helpers import FINAL, record_figure, wait_for

from lorastudio.settings import Settings
from ports import start_listening

SECRETS = {
    "LORASTUDIO_API_TOKEN": "api-token-0123456789",
    "LORASTUDIO_HF_TOKEN": "hf_studio_0123456789",
    "HF_TOKEN": "hf_env_0123456789",
    "GITHUB_TOKEN": "ghp_0123456789",
    "DB_PASSWORD": "hunter2-0123456789",
    "OPENAI_API_KEY": "sk-0123456789",
    "MY_SECRET": "psst-0123456789",
    "WANDB_API_KEY": "wk-0123456789",  # kept in the settings (RELIABILITY 860), in no environment
}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _descendants(pid: int) -> list[int]:
    """Every live process whose ancestry leads to `pid`."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == current]
        found += kids
        frontier += kids
    return found


def _workers(pid: int) -> list[int]:
    """`pid`'s live descendants but multiprocessing's resource tracker."""
    found = []
    for child in _descendants(pid):
        try:
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue  # gone meanwhile
    return found


def test_no_secret_in_the_environment_of_any_process_the_server_starts(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict]
) -> None:
    # with the standby worker (jobs/standby.py): the run's process is the one spawned in advance,
    # and the next standby is spawned while the run steps
    env = {**os.environ, "LORASTUDIO_HOME": str(settings.home), "LORASTUDIO_STANDBY_WORKER": "1", **SECRETS}
    cmd = [sys.executable, "-c", "from lorastudio.cli.app import main; main()", "serve", "--port"]
    server, port = start_listening(
        lambda port: subprocess.Popen(
            [*cmd, str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    )
    headers = {"Authorization": f"Bearer {SECRETS['LORASTUDIO_API_TOKEN']}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as client:

            def up() -> bool:
                try:
                    return client.get("/api/info").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(up, 60, "the server", 0.1)
            standby = wait_for(lambda: _workers(server.pid), 60, "the standby worker", 0.05)[0]
            started = client.post("/api/train/start", json={"config": flux_config(steps=5000)})
            assert started.status_code == 201, started.text
            job = wait_for(
                lambda: (
                    (j := client.get("/api/train/status").json()["job"]) is not None
                    and j["status"] == "running"
                    and j
                ),
                120,
                "the run",
                0.05,
            )
            assert job["pid"] == standby
            wait_for(lambda: set(_workers(server.pid)) - {standby}, 60, "the next standby", 0.05)
            processes = _descendants(server.pid)
            assert job["pid"] in processes
            helpers = [p for p in processes if p != job["pid"]]
            assert helpers, "no multiprocessing helper found (the resource tracker)"
            leaks = {}
            for pid in processes:
                environ = _environ(pid)
                found = sorted(k for k, v in environ.items() if k in SECRETS or v in SECRETS.values())
                if found:
                    leaks[pid] = found
            assert leaks == {}, f"secrets in /proc/PID/environ: {leaks}"
            assert SECRETS["LORASTUDIO_API_TOKEN"] in _environ(server.pid).values()  # the check can see them
            client.post("/api/train/stop", json={"save": False})
            wait_for(lambda: client.get("/api/train/status").json()["job"]["status"] in FINAL, 60, "the stop")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    record_figure("worker_environ_secrets", {"processes_checked": len(processes), "leaks": 0})
