"""kill -9 the server (a real `lorastudio serve` process) mid-run, a second run queued: the worker
dies with it; before any server starts, `lorastudio runs list|show` read both runs as interrupted
naming the server's pid; on restart the run record is intact and marked interrupted, and resuming
it from its last checkpoint (POST /api/runs/{id}/resume) trains to the end."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from reliability_helpers import (
    FINAL,
    cli_output,
    live_server,
    partial_files,
    process_alive,
    record_figure,
    serve_process,
    wait_for,
)

from lorastudio.api.app import create_app
from lorastudio.settings import Settings
from lorastudio.training.resume.checkpoint import list_checkpoints

STEPS = 80  # killed at step 25 (checkpoints every 10): the rest is the resume's


def test_server_kill_then_restart_and_resume(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict], tmp_path: Path
) -> None:
    config = flux_config(output_name="crash", steps=STEPS, save_every=10, keep_last=2)
    log = tmp_path / "serve.log"
    with serve_process(settings, log=log) as (proc, client):
        url = str(client.base_url).rstrip("/")
        assert f"{url}/" in log.read_text().splitlines()[0]  # `serve` announces where it listens
        started = client.post("/api/train/start", json={"config": config})
        assert started.status_code == 201, started.text
        job = started.json()
        seen = wait_for(
            lambda: (
                (j := client.get("/api/train/status").json()["job"]) is not None
                and j["steps_run"] >= 25
                and j
            ),
            120,
            "25 steps",
            poll=0.02,
        )
        queued = client.post("/api/train/start", json={"config": flux_config(output_name="b"), "queue": True})
        assert queued.status_code == 201 and queued.json()["status"] == "queued", queued.text
        proc.send_signal(signal.SIGKILL)  # the server dies without any cleanup
        proc.wait(10)
        t0 = time.monotonic()
        wait_for(lambda: not process_alive(seen["pid"]), 3, "the worker's death", poll=0.02)
        worker_gone_s = time.monotonic() - t0
        server_pid = proc.pid

    # Without a server, `runs list|show` (and any reader of the store) read the runs of a server
    # killed outright as interrupted at once, naming the server's pid: they were left "running" /
    # "queued" until the next server start (a user of the CLI alone saw them live for ever).
    listed = cli_output(settings, "runs", "list")
    for each in (job, queued.json()):
        line = next(row for row in listed.splitlines() if row.startswith(each["id"][:8]))
        assert "interrupted" in line, listed
        shown = cli_output(settings, "runs", "show", each["id"])
        assert "interrupted" in shown and f"pid {server_pid}" in shown, shown

    run_dir = settings.outputs_dir / "crash"
    assert partial_files(run_dir) == []
    kept = list_checkpoints(run_dir)
    assert kept, "no checkpoint survived"
    with live_server(create_app(settings)) as server:
        record = server.client.get(f"/api/runs/{job['id']}").json()
        assert record["status"] == "interrupted"
        assert record["config"]["output_name"] == "crash" and record["config"]["steps"] == STEPS
        assert record["steps_run"] >= 25 and record["metrics"], record
        assert record["resume_step"] == int(kept[-1].name.split("-")[1])
        listed_ids = [r["id"] for r in server.client.get("/api/runs").json()["runs"]]
        assert sorted(listed_ids) == sorted([job["id"], queued.json()["id"]]), listed_ids
        assert server.client.get("/api/train/status").json()["job"] is None  # nothing runs after a restart
        resumed = server.client.post(f"/api/runs/{job['id']}/resume", json={})
        assert resumed.status_code == 201, resumed.text
        service = server.app.state.service
        done = wait_for(
            lambda: (s := service.job(resumed.json()["id"]))["status"] in FINAL and s,
            120,
            "the resumed run",
            0.05,
        )
        assert done["status"] == "completed" and done["steps_run"] == STEPS, done
        assert Path(done["lora_path"]).is_file() and partial_files(run_dir) == []

    assert "interrupted" in cli_output(settings, "runs", "show", job["id"])
    assert job["id"][:8] in cli_output(settings, "runs", "list")
    record_figure(
        "server_kill",
        {
            "steps_at_kill": record["steps_run"],
            "worker_gone_after_s": round(worker_gone_s, 3),
            "resumed_from_step": record["resume_step"],
            "resumed_to_step": done["steps_run"],
        },
    )
