"""Ctrl-C in the terminal of `lorastudio serve`: the terminal sends SIGINT to the whole process
group, the server and its training and generation workers alike. The server's own shutdown
decides what happens to a run (the worker is stopped, the run marked interrupted and resumable);
before, each child died of the KeyboardInterrupt first, mid-step, with a traceback (the run
ended "failed"), and uvicorn re-raised the signal after its shutdown, which printed a traceback
of the cancelled lifespan task."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability_helpers import serve_process, wait_for

from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings


@pytest.mark.parametrize(
    "sig",
    [
        signal.SIGINT,
        pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
    ],  # fast: tests/unit/jobs/test_hangup.py
    ids=["ctrl-c", "hangup"],
)
def test_ctrl_c_interrupts_the_run_and_the_server_exits_quietly(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict], tmp_path: Path, sig: int
) -> None:
    """And the terminal's hangup (SIGHUP to the group: its window closed, its ssh dropped),
    session 30 environ: before, the server died of it at once, no shutdown (the run's record left
    running until the next start), and the workers of it too, nothing saved."""
    config = flux_config(output_name="ctrl-c", steps=5000, save_every=5)
    log = tmp_path / "serve.log"
    with serve_process(settings, log=log, own_session=True) as (proc, client):
        image = client.post(
            "/api/generate",
            json={"family": "flux", "base_model": config["base_model"], "prompt": "a star", "width": 64,
                  "height": 64, "steps": 2},
        )  # fmt: skip
        assert image.status_code == 201, image.text  # the generation worker is running now
        job = client.post("/api/train/start", json={"config": config}).json()
        wait_for(
            lambda: (client.get("/api/train/status").json()["job"] or {}).get("steps_run", 0) >= 6,
            120,
            "6 steps",
        )
        os.killpg(proc.pid, sig)  # what the terminal does on Ctrl-C, or on a hangup
        assert proc.wait(60) == 0
    output = log.read_text()
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    store = RunStore.open(settings.db_path)
    try:
        record = store.get_run(job["id"])
    finally:
        store.close()
    assert record["status"] == "interrupted", record
