"""bench/long_run.py through a real server (slow: a `lorastudio serve` child): a 100,000-step run's
record, samples, sample images, checkpoints, LoRAs, log and config answer, each at a cost that does
not grow with the run (session 35 long-run audit, RELIABILITY 1290: 50 sample images cost the server
20.2 CPU s before, 0.25 after). The default tests that bound each read's work:
tests/unit/jobs/test_store_metrics.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.long_run import options, run

pytestmark = pytest.mark.slow


def test_a_100000_step_runs_pages_cost_what_they_show(tmp_path: Path) -> None:
    rows = run(tmp_path / "home", options([]))
    by_step = {r["step"]: r for r in rows}
    asked = [r for r in rows if r["status"]]
    assert asked and all(r["status"] == 200 for r in asked), [r for r in asked if r["status"] != 200]
    assert by_step["50 sample images (cpu: all)"]["bytes"] == 400  # the first page: 100 rounds of 4 (1341)
    # CPU seconds of the server (a loaded host moves wall time, not these much): generous bounds,
    # an order of magnitude under the old reads (every metric row a request: 0.3-0.45 each)
    assert by_step["50 sample images (cpu: all)"]["server_cpu_s"] < 3.0, rows
    assert by_step["run record x10 (cpu: all)"]["server_cpu_s"] < 2.0, rows
    for step in ("checkpoints", "loras", "log (500 lines of 32 MB)", "config"):
        assert by_step[step]["server_cpu_s"] < 0.2, by_step[step]
