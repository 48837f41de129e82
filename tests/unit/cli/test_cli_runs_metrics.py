"""`lorastudio runs metrics ID`: every metric point a run stored, as CSV (RELIABILITY 1906).
`runs show --json` and GET /api/runs/{id} spread a run's points over at most 2,000, and the run
folder keeps no per-step series (losses.bin: the losses alone, in segments a resume appends), so
the whole series (lr, grad norm, samples/s, memory by step) could be read only from SQLite."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from cli_runner import run_cli_streams
from lorastudio.jobs import store_metrics
from lorastudio.jobs.records import METRIC_KEYS, JobStatus, now_iso
from lorastudio.jobs.store import RunStore
from lorastudio.settings import get_settings


def test_every_point_is_a_csv_row_read_a_page_at_a_time(
    studio_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_metrics, "PAGE", 3)  # 7 points: three pages, the last one short
    store = RunStore.open(get_settings().ensure_dirs().db_path)
    store.create_run("r1", "out", "flux", {"steps": 7}, now_iso(), status=JobStatus.COMPLETED)
    for step in range(1, 8):
        sps = None if step == 1 else 2.5  # not measured at the first step
        store.add_metric(
            "r1", {"step": step, "epoch": 1, "loss": 1.0 / step, "lr": 1e-4, "samples_per_second": sps}
        )
    store.close()
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "metrics", "r1")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == list(METRIC_KEYS)
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6, 7]  # each once, in order
    assert float(rows[2]["loss"]) == 1.0 / 3  # full precision
    assert rows[0]["samples_per_second"] == "" and rows[1]["samples_per_second"] == "2.5"
    assert rows[0]["grad_norm"] == ""
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "metrics", "nope")
    assert code == 2 and "no run with id 'nope'" in err and out == ""


def test_a_closed_pipe_is_not_told_as_an_unreadable_store(
    studio_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`runs metrics ID | head -2`: the writes' EPIPE came out as "cannot read the run database
    ...: [Errno 32] Broken pipe", exit 2; now the console program's answer to a closed pipe (a
    quiet SIGPIPE death, tests/unit/test_cli_closed_pipe.py), here stood in for by an exit 141."""
    import errno
    import sys

    from lorastudio.cli import app

    store = RunStore.open(get_settings().ensure_dirs().db_path)
    store.create_run("r1", "out", "flux", {"steps": 1}, now_iso(), status=JobStatus.COMPLETED)
    store.add_metric("r1", {"step": 1, "loss": 1.0})
    store.close()

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def sigpipe() -> None:
        raise SystemExit(141)

    monkeypatch.setattr(app, "die_of_sigpipe", sigpipe)
    monkeypatch.setattr(app, "mark_standalone", lambda: None)
    monkeypatch.setattr(sys, "argv", ["lorastudio", "runs", "metrics", "r1"])
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    with pytest.raises(SystemExit) as ended:
        app.main()
    assert ended.value.code == 141
    assert "run database" not in capsys.readouterr().err


def test_a_negative_step_is_printed_not_skipped(
    studio_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages started after step -1, so a stored step below 0 (no writer makes one; a store
    edited by hand, another tool's copy) was left out of the CSV without a word (RELIABILITY 2161,
    the session 40 newcode11 audit's note): every stored row is printed, in step order."""
    monkeypatch.setattr(store_metrics, "PAGE", 2)  # pages across the negative steps
    store = RunStore.open(get_settings().ensure_dirs().db_path)
    store.create_run("r1", "out", "flux", {"steps": 2}, now_iso(), status=JobStatus.COMPLETED)
    for step in (-5, -1, 0, 1, 2):
        store.add_metric("r1", {"step": step, "loss": float(step)})
    store.close()
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "metrics", "r1")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(int(r["step"]), float(r["loss"])) for r in rows] == [(s, float(s)) for s in (-5, -1, 0, 1, 2)]
