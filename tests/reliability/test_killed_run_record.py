"""A fresh run killed outright (kill -9 of a `lorastudio train` process, as a server killed with
its worker) after it wrote samples and a LoRA snapshot: the process that removes what it wrote
(a server start, the next `lorastudio train`) adds the note to the killed run's record, where
`lorastudio runs show`, GET /api/runs/ID and the web run page show the run's warnings. Was: the
removal was only logged (and printed by the CLI); the record said "interrupted" and nothing
about the files (jobs/killed_notes.py, training/resume/fresh_mark.py: the mark names the run)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability_helpers import (
    cli_output,
    live_server,
    process_alive,
    serve_process,
    wait_for,
    writing_config,
)

from forked_cli import start_cli
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

NOTE = "the killed fresh run wrote in"


def _killed_cli_run(settings: Settings, config: dict, tmp_path: Path) -> tuple[str, Path]:
    """A `lorastudio train` process of `config`, kill -9'd once its folder holds a sample and a
    LoRA snapshot (no checkpoint). Returns (its run id, its folder)."""
    run_dir = settings.outputs_dir / str(config["output_name"])
    path = tmp_path / f"{config['output_name']}.json"
    path.write_text(json.dumps(config))
    # a real process (forked from this one: tests/forked_cli.py; the home is studio_home's
    # LORASTUDIO_HOME), kill -9'd: what it leaves is the subject, not its imports
    log = tmp_path / f"{config['output_name']}.log"
    child = start_cli(log, "train", str(path), "--device", "cpu")
    try:

        def wrote() -> bool:
            if not child.is_alive():
                raise AssertionError(f"the run ended by itself ({child.exitcode}): {log.read_text()[-2000:]}")
            return any((run_dir / "samples").glob("step-*.png")) and any(
                (run_dir / "loras").glob("*.safetensors")
            )

        wait_for(wrote, 240, "the run's samples and snapshot", 0.02)
    finally:
        child.kill()
        child.join(30)
    assert child.exitcode == -signal.SIGKILL, child.exitcode
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").glob("step-*"))
    store = RunStore.open(settings.db_path, recover=False)
    try:
        (run_id,) = store.runs_with_output_name(run_dir.name)
    finally:
        store.close()
    return run_id, run_dir


def test_a_server_start_notes_what_it_removed_in_the_killed_runs_record(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict], tmp_path: Path
) -> None:
    from lorastudio.api.app import create_app

    run_id, run_dir = _killed_cli_run(settings, writing_config(flux_config, "killed"), tmp_path)
    with live_server(create_app(settings)) as server:

        def noted() -> dict | None:
            record = server.client.get(f"/api/runs/{run_id}").json()
            return record if any(NOTE in w for w in record["warnings"]) else None

        record = wait_for(noted, 60, "the clean-up's note in the run's record", 0.05)
    assert record["status"] == "interrupted"
    (note,) = [w for w in record["warnings"] if NOTE in w]
    assert f"{NOTE} {run_dir}: " in note and "samples/step-" in note and "loras/killed-step-" in note
    assert "its folder is gone, the name 'killed' free" in note
    assert not run_dir.exists()
    shown = cli_output(settings, "runs", "show", run_id)
    assert note.split(":")[0] in shown and "samples/step-" in shown  # `runs show` prints it


@pytest.mark.slow  # a second CLI run; the default suite has the server start's and the unit tests
def test_the_next_cli_run_notes_what_it_removed_in_the_killed_runs_record(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict], tmp_path: Path
) -> None:
    run_id, run_dir = _killed_cli_run(settings, writing_config(flux_config, "again"), tmp_path)
    path = tmp_path / "next.json"
    path.write_text(json.dumps(flux_config(output_name="again", steps=1)))
    out = cli_output(settings, "train", str(path), "--device", "cpu")
    assert "removed what a killed run left: removed " in out and f"{NOTE} {run_dir}" in out
    shown = cli_output(settings, "runs", "show", run_id)
    assert f"{NOTE} {run_dir}" in shown and "loras/again-step-" in shown
    store = RunStore.open(settings.db_path, recover=False)
    try:
        record = store.get_run(run_id)
        others = [store.get_run(i) for i in store.runs_with_output_name("again") if i != run_id]
    finally:
        store.close()
    (note,) = [w for w in record["warnings"] if NOTE in w]
    assert "its folder is gone, the name 'again' free" in note
    assert [r["status"] for r in others] == ["completed"]
    assert not any(NOTE in w for r in others for w in r["warnings"])  # only the killed run's record


@pytest.mark.slow  # a real server process (the worker's mark: test_killed_fresh_run in the default suite)
def test_a_server_killed_with_its_worker_gets_the_note_at_the_next_start(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict]
) -> None:
    """kill -9 a real `lorastudio serve` mid fresh run (its worker dies with it): the next server
    start removes the run's samples and snapshots and notes them in the job's record."""
    from lorastudio.api.app import create_app
    from lorastudio.training.resume.fresh_mark import read_mark

    run_dir = settings.outputs_dir / "served"
    with serve_process(settings) as (proc, client):
        started = client.post("/api/train/start", json={"config": writing_config(flux_config, "served")})
        assert started.status_code == 201, started.text
        job_id = started.json()["id"]

        def wrote() -> dict | None:
            job = client.get("/api/train/status").json()["job"]
            assert job is None or job["status"] not in ("failed", "completed"), job
            written = any((run_dir / "samples").glob("step-*.png")) and any(
                (run_dir / "loras").glob("*.safetensors")
            )
            return job if written and job is not None and job.get("pid") else None

        seen = wait_for(wrote, 240, "the job's samples and snapshot", 0.02)
        mark = read_mark(run_dir)
        assert mark is not None and mark.run_id == job_id  # the worker names its job in the mark
        proc.send_signal(signal.SIGKILL)  # the server dies without any clean-up
        proc.wait(10)
        wait_for(lambda: not process_alive(seen["pid"]), 30, "the worker's death", 0.02)
    assert run_dir.is_dir()  # nobody removed anything yet
    with live_server(create_app(settings)) as server:

        def noted() -> dict | None:
            record = server.client.get(f"/api/runs/{job_id}").json()
            return record if any(NOTE in w for w in record["warnings"]) else None

        record = wait_for(noted, 60, "the clean-up's note in the job's record", 0.05)
    assert record["status"] == "interrupted" and record["source"] == "service"
    (note,) = [w for w in record["warnings"] if NOTE in w]
    assert "samples/step-" in note and "loras/served-step-" in note
    assert "its folder is gone, the name 'served' free" in note and not run_dir.exists()
