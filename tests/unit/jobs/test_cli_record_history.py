"""`lorastudio train --resume` of a run older than the home's newest 200: its record starts with
the history of the run it continues (session 34 home at scale audit, RELIABILITY 1222). Before,
CliRunRecord.carry_over looked for that run among the newest 200 records only (RunStore.list_runs'
default), so in a long-used home the resumed run's loss curve started empty."""

from __future__ import annotations

from lorastudio.config import parse_train_config
from lorastudio.jobs.cli_record import open_cli_record
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.settings import get_settings

STAMP = "2026-01-01T00:00:00+00:00"


def test_a_resumed_cli_run_carries_the_history_of_a_run_past_the_newest_200() -> None:
    settings = get_settings()
    store = RunStore.open(settings.db_path)
    store._conn.execute("PRAGMA synchronous=OFF")  # the faked rows without an fsync each (seconds)
    try:
        store.create_run("first", "kept", "flux", {"steps": 10}, STAMP, status=JobStatus.STOPPED)
        for step in range(1, 11):
            store.add_metric("first", {"step": step, "loss": 1.0 / step})
        for i in range(220):  # a year of other runs since
            store.create_run(
                f"other{i}", f"other-{i}", "flux", {"steps": 1}, STAMP, status=JobStatus.COMPLETED
            )
    finally:
        store.close()
    # the record reads no model or dataset: a config that names them is enough (no tiny model built)
    raw = {"family": "flux", "base_model": "/nowhere/model", "data_dir": "/nowhere/data", "steps": 10}
    record = open_cli_record(parse_train_config({**raw, "output_name": "kept"}), settings)
    assert record is not None
    try:
        record.carry_over(6)
        run = record.store.get_run(record.run_id)
        assert [p["step"] for p in run["metrics"]] == [1, 2, 3, 4, 5, 6]
        assert run["steps_run"] == 6
    finally:
        record.close()


def test_a_resumed_runs_history_is_carried_in_one_transaction() -> None:
    # session 35 long-run audit (RELIABILITY 1292): the carried points (up to 2,000) were stored
    # one transaction each, ~1 ms of commit a point (the job service's resume held its lock for
    # 2 s at 2,000 points); and they were the whole run's 2,000 points filtered to the
    # checkpoint's steps, so a resume at half the run carried only half of them
    settings = get_settings()
    store = RunStore.open(settings.db_path)
    store.create_run("long", "long", "flux", {"steps": 8000}, STAMP, status=JobStatus.STOPPED)
    with store._tx() as cur:  # the long run's points, faked in one transaction
        cur.executemany(
            "INSERT INTO metrics (run_id, step, loss) VALUES (?, ?, ?)",
            [("long", step, 1.0 / step) for step in range(1, 8001)],
        )
    store.update_run("long", steps_run=8000)
    store.close()
    raw = {"family": "flux", "base_model": "/nowhere/model", "data_dir": "/nowhere/data", "steps": 8000}
    record = open_cli_record(parse_train_config({**raw, "output_name": "long"}), settings)
    assert record is not None
    commits: list[str] = []
    record.store._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    try:
        record.carry_over(4000)
        record.store._conn.set_trace_callback(None)
        steps = [p["step"] for p in record.store.get_run(record.run_id, max_points=10_000)["metrics"]]
        assert len(commits) <= 3, len(commits)  # the points, the steps run (old: one a point)
        assert len(steps) == 2000 and steps[0] == 1 and steps[-1] == 4000  # old: 1,001 to step 4,000
    finally:
        record.close()
