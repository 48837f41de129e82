"""A long run's metric points in the run store (session 35 long-run audit, RELIABILITY 1290): a
record's readers pay by the points they show, never by the run's length, and a chart's points
spread evenly over the steps. Before, every reader of a record (each sample image, the samples,
checkpoints, LoRAs and log of a run, its page) read every metric row and thinned them in Python:
0.3 CPU s a request at 100,000 steps. The work is counted in SQLite's virtual-machine steps
(deterministic), not timed."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio.api.routes.runs import run_samples, sample_file
from lorastudio.jobs.records import METRIC_KEYS, JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

STAMP = "2026-01-01T00:00:00+00:00"


def _fill(store: RunStore, run_id: str, steps: list[int]) -> None:
    """A run record with one metric point at each of `steps` (rows written in one statement)."""
    store.create_run(run_id, run_id, "flux", {"steps": steps[-1]}, STAMP, status=JobStatus.STOPPED)
    cols = ", ".join(METRIC_KEYS)
    rows = [(run_id, s, 0, 1.0 / s, 1.0 / s, 1e-4, 0.5, 1.0, 1.0) for s in steps]
    with store._tx() as cur:  # one transaction (the store commits each statement by itself)
        cur.executemany(f"INSERT INTO metrics (run_id, {cols}) VALUES (?,?,?,?,?,?,?,?,?)", rows)


def _vm_steps(conn: sqlite3.Connection, read: Callable[[], Any]) -> int:
    """SQLite's virtual-machine instructions `read` ran on `conn` (in hundreds)."""
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    conn.set_progress_handler(tick, 100)
    try:
        read()
    finally:
        conn.set_progress_handler(None, 100)
    return count[0]


def test_a_records_readers_pay_by_the_points_they_show_not_by_the_runs_length(
    tmp_path: Path, settings: Settings
) -> None:
    store = RunStore.open(tmp_path / "runs.db")
    _fill(store, "short", list(range(1, 4_001)))
    _fill(store, "long", list(range(1, 16_001)))  # 4x the steps
    for run_id in ("short", "long"):  # one sample image each, as a Samples view asks
        folder = settings.outputs_dir / run_id / "samples"
        folder.mkdir(parents=True)
        (folder / "step-000100-0.png").write_bytes(b"\x89PNG")
    page = {r: _vm_steps(store._conn, lambda r=r: store.get_run(r)) for r in ("short", "long")}
    assert page["long"] < 1.5 * page["short"], page  # the old read: 4x (every row read)
    assert len(store.get_run("long")["metrics"]) <= 2000
    for read in (
        lambda r: sample_file(r, "step-000100-0.png", store, settings),
        lambda r: run_samples(r, store, settings),
    ):
        cost = {r: _vm_steps(store._conn, lambda r=r, read=read: read(r)) for r in ("short", "long")}
        assert cost["long"] <= cost["short"] + 2, cost  # no metric row read at all
    assert store.get_run("long", max_points=0)["metrics"] == []
    store.close()


def test_a_resumed_runs_chart_spreads_its_points_over_the_steps(tmp_path: Path) -> None:
    # a resumed run's record: the original's thinned history (every 25th step to 5,000), then
    # every step (to 10,000); the chart's 100 points spread over the steps, half in each part
    store = RunStore.open(tmp_path / "runs.db")
    _fill(store, "resumed", [*range(25, 5_001, 25), *range(5_001, 10_001)])
    steps = [p["step"] for p in store.get_run("resumed", max_points=100)["metrics"]]
    assert len(steps) <= 100 and steps == sorted(set(steps))
    assert steps[0] == 25 and steps[-1] == 10_000
    early = sum(s <= 5_000 for s in steps)
    assert 40 <= early <= 60, steps  # the old picks by row: 4 of 101 before step 5,000
    assert [p["step"] for p in store.metric_points("resumed", 3, up_to=5_000)] == [25, 2_525, 5_000]
    assert [p["step"] for p in store.metric_points("resumed", 1)] == [10_000]
    assert len(store.metric_points("resumed", 10_000)) == 5_200  # few enough: every point
    store.close()
