"""`lorastudio lora push RUN` beside a server (or a `lorastudio train`) that writes RUN now:
refused, naming that run (its LoRA and sidecar may be renamed in mid-upload, RELIABILITY 2031).
Before, only the API's push was refused (fix 1923, from the server's own jobs); the CLI read the
sidecar and went ahead. The run store is a real one; the owners are this process (alive) and a
child that has exited (dead: settled, no refusal)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.processes import start_token
from lorastudio.settings import Settings


def _push(home: Path, monkeypatch: pytest.MonkeyPatch, name: str):
    from lorastudio.cli.app import _register, app
    from lorastudio.settings import get_settings

    _register()
    monkeypatch.setenv("LORASTUDIO_HOME", str(home))
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", "hf_unused")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, ["lora", "push", name, "--repo", "me/existing"])
    finally:
        get_settings.cache_clear()


def test_the_cli_push_of_a_run_a_live_owner_writes_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    settings = Settings(home=home).ensure_dirs()
    dead = subprocess.Popen(["true"])  # a pid whose process is gone: its run is settled, not live
    dead_token = start_token(dead.pid)
    dead.wait()
    store = RunStore.open(settings.db_path, recover=False)
    try:
        for run_id, name, owner in (("srv1", "live", os.getpid()), ("gone1", "dead", dead.pid)):
            store.create_run(
                run_id, name, "sdxl", {}, "2026-12-07T00:00:00Z",
                status=JobStatus.RUNNING, owner=(owner, start_token(owner) or dead_token),
            )  # fmt: skip
    finally:
        store.close()
    refused = _push(home, monkeypatch, "live")
    assert refused.exit_code == 1, refused.output
    assert "run srv1 (a server's job" in refused.output and f"process {os.getpid()}" in refused.output
    assert "writes 'live' now" in refused.output
    went_on = _push(home, monkeypatch, "dead")  # its owner died: the push goes on (no LoRA here)
    assert went_on.exit_code == 2 and "no LoRA 'dead'" in went_on.output, went_on.output
    assert "writes 'dead'" not in went_on.output
