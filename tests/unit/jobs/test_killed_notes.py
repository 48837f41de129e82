"""The note on what a killed fresh run left goes to the record its folder's mark names
(jobs/killed_notes.py), from a server start and from the next `lorastudio train`; a record that
is gone, of another output name, or unreadable, and a store that cannot be opened, are logged,
never fatal: the removal stands. The real kill: tests/reliability/test_killed_run_record.py."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.jobs.killed_notes import record_note
from lorastudio.jobs.leftovers import (
    clear_abandoned_runs,
    find_leftovers,
    killed_fresh_runs,
    note_killed_runs,
    removal_note,
    remove_leftovers,
)
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from lorastudio.training.resume.run_lock import claim_run_dir, release_run_dir

RUN_ID = "0123456789ab"
NOTE = "the killed fresh run wrote in"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home").ensure_dirs()


def _record(settings: Settings, run_id: str, output_name: str) -> None:
    store = RunStore.open(settings.db_path, recover=False)
    try:
        store.create_run(
            run_id, output_name, "flux", {"steps": 5}, "2026-12-05T00:00:00", status=JobStatus.RUNNING
        )
    finally:
        store.close()


def _warnings(settings: Settings, run_id: str) -> list[str]:
    store = RunStore.open(settings.db_path, recover=False)
    try:
        return store.get_run(run_id)["warnings"]
    finally:
        store.close()


def _killed(settings: Settings, name: str, run_id: str | None = RUN_ID) -> Path:
    fd = claim_run_dir(settings.outputs_dir / name, run_id)
    run = settings.outputs_dir / name
    for rel in ("samples/step-000001-0.png", f"loras/{name}-step-000001.safetensors"):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_bytes(b"written by the run")
    release_run_dir(fd)
    return run


def _server_start(settings: Settings) -> None:
    fresh = killed_fresh_runs(settings)
    found = find_leftovers(settings)
    remove_leftovers(found)
    note_killed_runs(settings, found, fresh)


def _next_cli_run(settings: Settings) -> None:
    for cleared in clear_abandoned_runs(settings):  # as train_cmd._remove_abandoned_runs
        if (note := removal_note(cleared.run, cleared.removed)) is not None:
            record_note(settings, cleared.run, cleared.run_id, note)


REMOVERS = pytest.mark.parametrize(
    "remove", [_server_start, _next_cli_run], ids=["server-start", "next-cli-run"]
)


@REMOVERS
def test_the_note_goes_to_the_record_the_mark_names(
    settings: Settings, remove: Callable[[Settings], None]
) -> None:
    _record(settings, RUN_ID, "x")
    _record(settings, "ba9876543210", "x")  # an earlier run of that name: not this folder's
    run = _killed(settings, "x")
    remove(settings)
    assert not run.exists()
    (note,) = _warnings(settings, RUN_ID)
    assert note.startswith(
        f"removed 2 entries {NOTE} {run}: loras/x-step-000001.safetensors, samples/step-000001-0.png"
    )
    assert _warnings(settings, "ba9876543210") == []


@REMOVERS
@pytest.mark.parametrize("case", ["deleted", "other-name", "unreadable", "no-id", "no-store", "bad-store"])
def test_a_record_that_cannot_take_the_note_is_logged_and_the_removal_stands(
    settings: Settings, remove: Callable[[Settings], None], case: str, caplog: pytest.LogCaptureFixture
) -> None:
    if case == "other-name":
        _record(settings, RUN_ID, "not-x")  # a mark never notes another run's record
    elif case == "unreadable":
        _record(settings, RUN_ID, "x")
        with sqlite3.connect(settings.db_path) as conn:
            conn.execute("UPDATE runs SET warnings_json='[not json' WHERE id=?", (RUN_ID,))
    elif case == "bad-store":
        settings.db_path.parent.mkdir(parents=True, exist_ok=True)
        settings.db_path.write_bytes(b"not a database" * 100)
    elif case == "deleted":
        _record(settings, "ba9876543210", "x")  # the store exists; the killed run's record does not
    run = _killed(settings, "x", None if case == "no-id" else RUN_ID)
    with caplog.at_level(logging.WARNING, logger="lorastudio.jobs"):
        remove(settings)
    assert not run.exists()
    expected = {
        "deleted": "no record of a run with output 'x'",
        "other-name": "no record of a run with output 'x'",
        "unreadable": "in its record failed",
        "no-id": "its mark names no run record",
        "no-store": "no run store at",
        "bad-store": "the run store could not be opened",
    }[case]
    assert any(expected in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    if case == "other-name":
        assert _warnings(settings, RUN_ID) == []
