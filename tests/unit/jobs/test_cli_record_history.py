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
