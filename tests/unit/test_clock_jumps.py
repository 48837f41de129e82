"""The wall clock stepped back or forward (an NTP correction, a VM resumed, a host booted in
1970): what the studio orders and measures must not follow it (session 32 clock audit). In
process, no torch."""

from __future__ import annotations

import datetime
import json
import time
import types

import pytest

from lorastudio import timings
from lorastudio.host_clock import host_now
from lorastudio.jobs import launch_report


def _wall_clock(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType) -> list[datetime.datetime]:
    """`module.datetime.datetime.now()` answers the last time put in the returned list."""
    times: list[datetime.datetime] = []

    class Clock(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:  # type: ignore[override]
            return times[-1].astimezone(tz) if tz else times[-1]

    monkeypatch.setattr(module, "datetime", types.SimpleNamespace(UTC=datetime.UTC, datetime=Clock))
    return times


def test_run_time_records_are_newest_first_and_kept_across_a_clock_set_back(tmp_path, monkeypatch):
    times = _wall_clock(monkeypatch, timings)
    monkeypatch.setattr(timings, "MAX_RECORDS", 3)
    home = tmp_path / "home"
    (home / timings.HISTORY_DIR).mkdir(parents=True)  # a record of an older version's naming
    old = {"version": timings.RECORD_VERSION, "run": "older"}
    (home / timings.HISTORY_DIR / "20300101T000000000000-older.json").write_text(json.dumps(old))
    utc = datetime.UTC
    for run, when in [("a", (15, 0)), ("b", (15, 30)), ("c", (14, 40))]:  # then the clock set back 50 min
        times.append(datetime.datetime(2026, 12, 6, *when, tzinfo=utc))
        timings.write_record(home, run, {"run": run})
    assert [r["run"] for r in timings.read_records(home)] == ["c", "b", "a"]  # the 2030 one pruned
    times.append(datetime.datetime(1970, 1, 1, tzinfo=utc))  # a host booted with no clock
    timings.write_record(home, "d", {"run": "d"})
    assert [r["run"] for r in timings.read_records(home)] == ["d", "c", "b"]


def _step_wall_clock(monkeypatch: pytest.MonkeyPatch, by_s: float) -> None:
    """time.time() from now on `by_s` off (an NTP step, a VM's clock corrected on resume)."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + by_s)
    monkeypatch.setattr(time, "time_ns", lambda: int((real() + by_s) * 1e9))


def test_a_clock_step_before_the_run_begins_is_not_counted_as_the_process_start(monkeypatch):
    started = timings.process_started_at()  # the CLI, the job worker, a rank: then train()
    assert started is not None
    _step_wall_clock(monkeypatch, 3600.0)  # the imports of train() meanwhile, or a standby's hand-over
    clock = timings.PhaseClock(started_at=started)
    assert abs(clock.before - (host_now() - started)) < 5.0  # this process's age, not an hour more


def test_the_rank_that_failed_first_is_named_across_a_clock_set_back(tmp_path, monkeypatch):
    monkeypatch.setenv(launch_report.LAUNCH_DIR_ENV, str(tmp_path))
    launch_report.note_rank_failure(1, "cannot use image a.png: its pixels do not decode")
    _step_wall_clock(monkeypatch, -3600.0)
    launch_report.note_rank_failure(
        0, "RuntimeError: [gloo] Connection reset by peer"
    )  # rank 1's exit broke it
    launch_report.write_failures({0: (100, 1), 1: (101, 1)})
    assert (
        launch_report.launch_failure(tmp_path, 2)
        == "rank 1 of 2 failed: cannot use image a.png: its pixels do not decode"
    )


def test_a_jobs_elapsed_time_is_the_servers_monotonic_not_its_wall_clock(monkeypatch):
    from lorastudio.jobs.records import Job

    job = Job(id="j1", config=None, worker_config=None)  # type: ignore[arg-type]  # elapsed reads no config
    assert job.elapsed_s() is None  # not started
    job.started_mono = time.monotonic() - 60.0
    _step_wall_clock(monkeypatch, -3600.0)  # the page's Elapsed must not go back an hour with it
    assert 59.0 <= (job.elapsed_s() or 0.0) < 90.0
    job.finished_mono = job.started_mono + 75.0
    assert job.elapsed_s() == 75.0


def test_the_lora_list_is_newest_first_by_the_run_store_not_the_files_mtimes(tmp_path):
    import os

    from lorastudio.api.routes.loras import lora_list
    from lorastudio.jobs.records import now_iso
    from lorastudio.jobs.store import RunStore
    from lorastudio.settings import Settings

    settings = Settings(home=tmp_path / "home").ensure_dirs()
    store = RunStore.open(tmp_path / "runs.db")
    hour_ago = time.time() - 3600
    for name, mtime in [("before", hour_ago + 60), ("after", hour_ago), ("by-hand", hour_ago - 60)]:
        folder = settings.outputs_dir / name  # "after" written once the clock was set back an hour
        folder.mkdir()
        (folder / f"{name}.safetensors").write_bytes(b"\0" * 8)
        os.utime(folder / f"{name}.safetensors", (mtime, mtime))
        if name != "by-hand":  # copied in by hand: no run recorded it
            store.create_run(
                name, name, "flux", {"family": "flux", "steps": 1, "output_name": name}, now_iso()
            )
    listed = lora_list(settings, store)["loras"]
    assert [item["name"] for item in listed] == ["after", "before", "by-hand"]


@pytest.fixture
def new_york(monkeypatch):
    """TZ=America/New_York for the test (daylight saving time from March to November)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_runs_list_shows_the_records_utc_stamps_in_local_time(studio_home, new_york, capsys, monkeypatch):
    from cli_runner import run_cli_streams
    from lorastudio.jobs.store import RunStore
    from lorastudio.settings import get_settings

    settings = get_settings().ensure_dirs()
    store = RunStore.open(settings.db_path)
    for run, stamp in [
        ("winter", "2026-12-06T22:40:54.123+00:00"),
        ("summer", "2026-07-01T12:00:00.000+00:00"),
    ]:
        store.create_run(run, run, "flux", {"family": "flux", "steps": 1, "output_name": run}, stamp)
    store.close()
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "list")
    assert code == 0, err
    assert "2026-12-06 17:40:54" in out and "2026-07-01 08:00:00" in out, out  # EST, then EDT


def test_a_log_lines_time_tells_the_hour_daylight_saving_time_repeats(new_york):
    from lorastudio.jobs.worker_log import stamp

    first = datetime.datetime(2026, 11, 1, 5, 30, tzinfo=datetime.UTC).timestamp()  # 01:30 EDT
    assert stamp(first) == "2026-11-01 01:30:00,000-0400"
    assert stamp(first + 3600.25) == "2026-11-01 01:30:00,250-0500"  # 01:30 again, in EST
