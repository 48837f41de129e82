"""What a killed CLI run left in outputs/ is removed by the next `lorastudio train` (the server
start did it; a CLI-only user had no clean-up): the staging of a killed write, the empty folder
of a run killed before it wrote a file, but never a folder a live session holds
(training/resume/run_lock.py), checked by the kernel's lock, not by a pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.errors import ConfigError, JobActive
from lorastudio.jobs.leftovers import remove_abandoned_runs
from lorastudio.settings import get_settings
from lorastudio.training.resume.run_lock import claim_run_dir, lock_run_dir, release_run_dir, unowned


def _killed_in_first_checkpoint(outputs: Path, name: str) -> Path:
    staging = outputs / name / "checkpoints" / ".staging-0123abcd"
    staging.mkdir(parents=True)
    (staging / "state.pt").write_bytes(b"half a checkpoint")
    return outputs / name


def test_the_next_cli_run_removes_what_a_killed_run_left(tiny_model, small_dataset, tmp_path, run_settings):
    outputs = get_settings().outputs_dir
    killed = _killed_in_first_checkpoint(outputs, "again")
    kept = outputs / "resumable"
    (kept / "checkpoints" / "step-000002").mkdir(parents=True)
    (kept / "checkpoints" / "step-000002" / "state.pt").write_bytes(b"a checkpoint")
    (kept / "checkpoints" / ".staging-4567cdef").mkdir()
    live = outputs / "live"
    live.mkdir()
    held = lock_run_dir(live)  # a live session's folder (another process in real use)
    try:
        _register()
        config = tmp_path / "run.json"
        config.write_text(
            json.dumps(
                run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 1, "output_name": "again"})
            )
        )
        result = CliRunner().invoke(app, ["train", str(config), "--device", "cpu"])
        assert result.exit_code == 0, result.output  # was: "outputs/again already exists"
        assert f"removed what a killed run left: {killed}" in result.output
        assert (killed / "again.safetensors").is_file()
        assert live.is_dir()  # held: never touched
        assert [p.name for p in (kept / "checkpoints").iterdir()] == ["step-000002"]  # staging gone
    finally:
        release_run_dir(held)
    assert remove_abandoned_runs(get_settings()) == [live]  # free once its session ended


def test_a_held_folder_is_never_abandoned_and_a_claim_holds_its_folder(tmp_path: Path) -> None:
    run = tmp_path / "outputs" / "run"
    fd = claim_run_dir(run)
    try:
        with unowned(run) as free:
            assert not free
        with pytest.raises(JobActive, match="another live run writes"):
            lock_run_dir(run)
        with pytest.raises(ConfigError, match="already exists"):
            claim_run_dir(run)
    finally:
        release_run_dir(fd)
    with unowned(run) as free:
        assert free
    assert not list((tmp_path / "outputs").glob(".*"))


def test_a_killed_process_releases_its_folder(tmp_path: Path) -> None:
    """The kernel drops a SIGKILLed session's lock: its folder reads as abandoned."""
    run = tmp_path / "run"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from lorastudio.training.resume.run_lock import claim_run_dir;"
            f" claim_run_dir(Path({str(run)!r})); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    with unowned(run) as free:
        assert not free
    child.kill()
    child.wait(10)
    deadline = time.monotonic() + 5
    while True:
        with unowned(run) as free:
            if free or time.monotonic() > deadline:
                break
    assert free


def test_the_next_cli_run_removes_what_a_killed_fresh_run_wrote(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """A CLI run killed after its samples and a snapshot, before a checkpoint (fix 164): the next
    `lorastudio train` removes them and the folder, says so in one line, and takes the name."""
    outputs = get_settings().outputs_dir
    killed = outputs / "wrote"
    fd = claim_run_dir(killed)  # as the killed run's loop did: created and marked
    for rel in (
        "samples/step-000001-0.png",
        "loras/wrote-step-000001.safetensors",
        "loras/wrote-step-000001.json",
    ):
        (killed / rel).parent.mkdir(parents=True, exist_ok=True)
        (killed / rel).write_bytes(b"written by the killed run")
    release_run_dir(fd)  # its process died
    _register()
    config = tmp_path / "run.json"
    config.write_text(
        json.dumps(
            run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 1, "output_name": "wrote"})
        )
    )
    result = CliRunner().invoke(app, ["train", str(config), "--device", "cpu"])
    assert result.exit_code == 0, result.output  # was: "outputs/wrote already exists"
    assert (
        f"removed what a killed run left: removed 3 entries the killed fresh run wrote in {killed}: "
        "loras/wrote-step-000001.json, loras/wrote-step-000001.safetensors, samples/step-000001-0.png; "
        "its folder is gone, the name 'wrote' free"
    ) in result.output
    assert (killed / "wrote.safetensors").is_file()
    assert not (killed / "samples").exists() and not (killed / "loras").exists()
