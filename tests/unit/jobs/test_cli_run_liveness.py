"""A `lorastudio train` run killed outright (SIGKILL: it cannot record its end) is read as
interrupted by the next reader of the runs (`runs list|show`, the API), with the checkpoint it
can resume from (RELIABILITY.md fix 29). The record names the process by pid and start token, so
a live run is never marked, a reused pid is not taken for the run's process, and a run recorded
on another host or in another pid namespace (which this reader cannot see) is left alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from forked_cli import start_cli
from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.jobs.records import JobStatus, now_iso
from lorastudio.jobs.store import RunStore
from lorastudio.processes import process_gone, start_token
from lorastudio.settings import Settings
from lorastudio.training.resume.checkpoint import checkpoint_step, list_checkpoints


def _dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_run_whose_process_is_gone_or_another_is_read_as_interrupted(settings: Settings) -> None:
    store = RunStore.open(settings.db_path, recover=False)
    me, token = os.getpid(), start_token(os.getpid())
    assert token is not None and not process_gone(me, token)
    host, boot, namespace, ticks = token.split("|")
    reused = "|".join((host, boot, namespace, str(int(ticks) - 1)))  # the pid, reused by another process
    owners = {
        "alive": (me, token),
        "dead": (_dead_pid(), token),
        "reused": (me, reused),
        "rebooted": (me, "|".join((host, "another-boot", namespace, ticks))),
        "other-host": (_dead_pid(), "|".join(("another-host", boot, namespace, ticks))),
        "other-pid-namespace": (_dead_pid(), "|".join((host, boot, "pid:[1]", ticks))),
    }
    try:
        for run_id, owner in owners.items():
            store.create_run(run_id, run_id, "flux", {"steps": 9}, now_iso(), source="cli",
                             status=JobStatus.RUNNING, owner=owner)  # fmt: skip
        store.create_run("server", "server", "flux", {"steps": 9}, now_iso(), status=JobStatus.RUNNING)
        runs = {r["id"]: r for r in store.list_runs()}
        assert {k: r["status"] for k, r in runs.items()} == {
            "alive": "running", "dead": "interrupted", "reused": "interrupted", "rebooted": "interrupted",
            "other-host": "running", "other-pid-namespace": "running", "server": "running",
        }  # fmt: skip
        assert runs["dead"]["error"].startswith(
            f"the `lorastudio train` process (pid {owners['dead'][0]}) ended"
        )
        assert runs["dead"]["finished_at"]
        # a store this reader cannot write still reads the run as interrupted
        store.create_run("late", "late", "flux", {}, now_iso(), source="cli", status=JobStatus.RUNNING,
                         owner=(_dead_pid(), None))  # fmt: skip
        store._conn.execute("PRAGMA query_only=ON")
        assert store.get_run("late")["status"] == "interrupted"
        store._conn.execute("PRAGMA query_only=OFF")
        assert store.get_run("late")["status"] == "interrupted"  # stored by this read
        store._conn.execute("UPDATE runs SET status='running' WHERE id='late'")
        store._conn.execute("PRAGMA query_only=ON")
        assert store.get_run("late")["status"] == "interrupted"
    finally:
        store.close()


def test_a_cli_run_killed_with_sigkill_is_interrupted_with_its_checkpoint(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    config = tmp_path / "run.json"
    body = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    config.write_text(json.dumps({**body, "steps": 100_000, "save_every": 2, "output_name": "killed"}))
    # a real process (its own pid and start token, killed by a real SIGKILL), forked rather than
    # a fresh interpreter: the subject is the record it leaves, not its imports
    log = tmp_path / "train.log"
    train = start_cli(log, "train", str(config), "--device", "cpu")
    run_dir = settings.outputs_dir / "killed"
    try:
        deadline = time.monotonic() + 240
        while not list_checkpoints(run_dir):
            assert train.is_alive(), log.read_text(encoding="utf-8")[-3000:]
            assert time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.1)
        live = CliRunner().invoke(app, ["runs", "list"])
        assert live.exit_code == 0 and "\trunning\t" in live.output, live.output  # alive: not marked
    finally:
        train.kill()
        train.join(30)
    assert train.exitcode == -signal.SIGKILL, train.exitcode
    killed_at = time.monotonic()
    listed = CliRunner().invoke(app, ["runs", "list"])
    listed_s = time.monotonic() - killed_at
    assert listed.exit_code == 0 and "\tinterrupted\t" in listed.output, listed.output
    store = RunStore.open(settings.db_path, recover=False)
    try:
        (run,) = store.list_runs()
    finally:
        store.close()
    assert run["status"] == "interrupted" and run["source"] == "cli"
    assert f"process (pid {train.pid}) ended without recording the end of this run" in run["error"]
    step = max(checkpoint_step(p) or 0 for p in list_checkpoints(run_dir))
    shown = CliRunner().invoke(app, ["runs", "show", run["id"]])
    assert f"resume       from step {step}: lorastudio train --resume {run_dir}" in shown.output, shown.output
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        detail = client.get(f"/api/runs/{run['id']}").json()
    assert detail["status"] == "interrupted" and detail["resume_step"] == step
    assert detail["error"] == run["error"]
    print(
        f"SIGKILLed CLI run read as interrupted by `runs list` {listed_s:.2f} s after the kill (step {step})"
    )
