"""When a killed run ended, as its record says (RELIABILITY 1902). A run whose process died
without recording its end (a server or a `lorastudio train` killed, a power cut) was marked
interrupted with finished_at = the moment a reader noticed: the next server start, the next
`runs list` hours later; its record then said it ended then, and its time (finished_at less
started_at, no elapsed_s) counted the hours it was dead. Now it ends when its owner last wrote
it (the run's seen_at: its last step), and a row an older version wrote, with none, as before."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lorastudio.jobs import store as store_module
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.store import RunStore

LAST_STEP = "2026-12-07T03:00:00.000+00:00"
NOTICED = "2026-12-07T09:00:00.000+00:00"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store's now_iso: the last item of the returned list."""
    now = [LAST_STEP]
    monkeypatch.setattr(store_module, "now_iso", lambda: now[-1])
    return now


def _live_run(store: RunStore, run_id: str, owner: tuple[int, str | None] | None = None) -> None:
    """A run recorded, started and at its third step, all at LAST_STEP."""
    store.create_run(
        run_id, "out", "flux", {"steps": 10}, LAST_STEP, source="cli" if owner else "service", owner=owner
    )
    store.update_run(run_id, status=JobStatus.RUNNING, started_at=LAST_STEP)
    for step in (1, 2, 3):
        store.add_metric(run_id, {"step": step, "loss": 1.0})


def test_a_server_killed_mid_run_ends_its_run_at_its_last_step(tmp_path: Path, clock: list[str]) -> None:
    db = tmp_path / "lorastudio.db"
    store = RunStore.open(db)
    _live_run(store, "r")
    store.close()  # the server is killed here; the next one starts six hours later
    clock.append(NOTICED)
    again = RunStore.open(db)  # marks the live runs interrupted
    run = again.get_run("r")
    assert run["status"] == "interrupted" and run["steps_run"] == 3
    assert run["finished_at"] == LAST_STEP  # before: NOTICED


def test_a_dead_cli_owner_is_settled_at_its_last_step(tmp_path: Path, clock: list[str]) -> None:
    child = subprocess.Popen(["true"])
    child.wait()  # a pid no process holds now: the owner is gone
    store = RunStore.open(tmp_path / "lorastudio.db", recover=False)
    _live_run(store, "c", owner=(child.pid, None))
    clock.append(NOTICED)
    settled = store.settle_dead_owners()
    assert settled["c"]["finished_at"] == LAST_STEP  # before: NOTICED
    run = store.get_run("c")
    assert run["status"] == "interrupted" and run["finished_at"] == LAST_STEP


def test_a_row_of_an_older_version_ends_when_it_is_noticed(tmp_path: Path, clock: list[str]) -> None:
    """No seen_at (an older version wrote the row): the time of the notice, as before."""
    db = tmp_path / "lorastudio.db"
    store = RunStore.open(db)
    _live_run(store, "o")
    store._conn.execute("UPDATE runs SET seen_at=NULL")
    store._conn.commit()
    store.close()
    clock.append(NOTICED)
    assert RunStore.open(db).get_run("o")["finished_at"] == NOTICED
