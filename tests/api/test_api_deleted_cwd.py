"""A server whose working folder is deleted after its start (`lorastudio serve` run in a folder
removed later) still starts its workers. Before, every run failed "could not start the worker:
[Errno 2] No such file or directory" (multiprocessing's spawn asks for os.getcwd()), the standby
thread died with a traceback, and a torch child started in the deleted folder died importing
torch ("Intel oneMKL FATAL ERROR"). The CLI's refusal in a deleted folder:
tests/unit/test_cli_environment.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from api_helpers import FINAL, LiveServer, upload_folder, wait_status


@pytest.mark.slow  # a worker spawned and a run trained (~20 s on 2 cores); fast: tests/unit/test_cli_environment.py
def test_a_run_starts_after_the_servers_working_folder_is_deleted(
    server: LiveServer,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    config = flux_config(output_name="nocwd", steps=2)  # the tiny model made first (torch, here)
    gone = tmp_path / "launched-here"
    gone.mkdir()
    monkeypatch.chdir(gone)  # restored after the test
    gone.rmdir()
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    job = wait_status(client, started.json()["id"], FINAL)
    assert job["status"] == "completed", job["error"]
    assert job["lora_path"] and Path(job["lora_path"]).is_file()
    assert os.getcwd() == "/"  # where the server works from now on
