"""The run store: records survive reopening, live runs become interrupted, writes are atomic."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from lorastudio.errors import NotFound
from lorastudio.jobs.records import JobStatus, now_iso
from lorastudio.jobs.store import RunStore
from old_store import first_version_store


def _store(tmp_path: Path) -> RunStore:
    return RunStore.open(tmp_path / "db" / "runs.db")


def _create(store: RunStore, run_id: str, name: str = "out") -> None:
    store.create_run(run_id, name, "flux", {"family": "flux", "steps": 10, "output_name": name}, now_iso())


def test_run_round_trip_with_metrics_and_outputs(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create(store, "a")
    store.update_run("a", status=JobStatus.RUNNING, started_at=now_iso())
    for step in (1, 2, 3):
        store.add_metric("a", {"step": step, "loss": 1.0 / step, "lr": 1e-4, "grad_norm": None})
    store.add_output("a", "lora", "/x/out.safetensors")
    store.update_run("a", status=JobStatus.COMPLETED, finished_at=now_iso())
    store.close()

    again = _store(tmp_path)
    run = again.get_run("a")
    assert run["status"] == "completed"
    assert run["config"] == {"family": "flux", "steps": 10, "output_name": "out"}
    assert [m["step"] for m in run["metrics"]] == [1, 2, 3]
    assert run["metrics"][2]["loss"] == pytest.approx(1 / 3)
    assert run["metrics"][0]["grad_norm"] is None
    assert run["steps_run"] == 3 and run["total_steps"] == 10
    assert run["outputs"] == [{"kind": "lora", "path": "/x/out.safetensors"}]
    assert [r["id"] for r in again.list_runs()] == ["a"]


def test_live_runs_are_marked_interrupted_on_the_next_open_only(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for run_id, status in [("q", JobStatus.QUEUED), ("r", JobStatus.RUNNING), ("d", JobStatus.COMPLETED)]:
        _create(store, run_id, name=run_id)
        store.update_run(run_id, status=status)
    store.close()

    reader = RunStore.open(tmp_path / "db" / "runs.db", recover=False)
    assert reader.get_run("r")["status"] == "running"  # a reader next to a live server changes nothing
    reader.close()

    again = _store(tmp_path)
    statuses = {r["id"]: r["status"] for r in again.list_runs()}
    assert statuses == {"q": "interrupted", "r": "interrupted", "d": "completed"}
    assert "server stopped" in again.get_run("r")["error"]


def test_metrics_are_decimated_on_read(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create(store, "a")
    for step in range(1, 1001):
        store.add_metric("a", {"step": step, "loss": 1.0})
    points = store.get_run("a", max_points=100)["metrics"]
    assert len(points) <= 101
    assert points[0]["step"] == 1 and points[-1]["step"] == 1000


def test_delete_cascades_and_unknown_ids_are_not_found(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create(store, "a")
    store.add_metric("a", {"step": 1, "loss": 1.0})
    store.delete_run("a")
    with pytest.raises(NotFound):
        store.get_run("a")
    with pytest.raises(NotFound):
        store.delete_run("a")
    conn = sqlite3.connect(store.path)
    assert conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _create(store, "a")
    with pytest.raises(sqlite3.IntegrityError):
        _create(store, "a")  # duplicate id: the transaction rolls back
    with pytest.raises(ValueError):
        store.update_run("a", id="b")  # not an updatable column
    assert [r["id"] for r in store.list_runs()] == ["a"]


def test_a_run_records_who_started_it_and_an_older_store_gains_the_column(tmp_path: Path) -> None:
    # a store of a version without sources: its runs are the service's
    path = first_version_store(tmp_path / "old.db", "old", "o", "2026-01-01")
    store = RunStore.open(path)
    store.create_run("c", "c", "flux", {}, now_iso(), source="cli", status=JobStatus.RUNNING)
    assert {r["id"]: (r["source"], r["status"]) for r in store.list_runs()} == {
        "old": ("service", "completed"),
        "c": ("cli", "running"),
    }
    assert store.get_run("old")["plan"] is None
    with pytest.raises(ValueError, match="unknown run source"):
        store.create_run("x", "x", "flux", {}, now_iso(), source="cron")


def test_runs_are_listed_newest_first_across_a_clock_set_back(tmp_path: Path) -> None:
    """Session 30 environ: the wall clock set back an hour between two runs (a wrong clock
    corrected): the run made after is still listed first (was below the earlier hour's runs)."""
    store = RunStore.open(tmp_path / "db.sqlite")
    try:
        for run_id, stamp in [
            ("a", "2026-12-06T15:00:00.000+00:00"),
            ("b", "2026-12-06T15:30:00.000+00:00"),
            ("c", "2026-12-06T14:40:00.000+00:00"),  # made after b, the clock set back an hour
        ]:
            store.create_run(run_id, run_id, "flux", {"steps": 1}, stamp)
        assert [r["id"] for r in store.list_runs()] == ["c", "b", "a"]
        store.delete_run("c")
        store.create_run("d", "d", "flux", {"steps": 1}, "2026-12-06T14:41:00.000+00:00")
        assert [r["id"] for r in store.list_runs(limit=2)] == ["d", "b"]
    finally:
        store.close()


def test_an_output_names_place_survives_its_records_and_an_older_store_gains_the_places(
    tmp_path: Path,
) -> None:
    """RELIABILITY 1342: the LoRA list's order came from the newest run record of each name, so
    deleting that record moved the name down (a LoRA listed again on a later page). The places are
    kept beside the runs: a store of the first layout gains them in its runs' order, a deleted
    record lowers none, a new run goes on top, and a run an older version recorded meanwhile (no
    place) is placed at the next open."""
    path = first_version_store(tmp_path / "old.db", "old", "o", "2026-01-01")
    store = RunStore.open(path)
    try:
        store.create_run("a", "a", "flux", {}, now_iso(), status=JobStatus.COMPLETED)
        store.create_run("b", "b", "flux", {}, now_iso(), status=JobStatus.COMPLETED)
        places = store.output_order()
        assert sorted(places, key=places.__getitem__) == ["o", "a", "b"]
        store.delete_run("b")  # was: b's place fell to nothing (below every recorded name)
        assert store.output_order() == places
        store.create_run("o2", "o", "flux", {}, now_iso(), status=JobStatus.COMPLETED)  # o trained again
        assert max(store.output_order(), key=store.output_order().__getitem__) == "o"
    finally:
        store.close()
    conn = sqlite3.connect(path)  # an older version records a run of a (it knows no places)
    conn.execute(
        "INSERT INTO runs (id, output_name, family, status, created_at, config_json) VALUES ('a2', 'a', 'flux', 'completed', '', '{}')"
    )
    conn.commit()
    conn.close()
    store = RunStore.open(path)
    try:
        places = store.output_order()
        assert sorted(places, key=places.__getitem__) == ["b", "o", "a"]
    finally:
        store.close()
