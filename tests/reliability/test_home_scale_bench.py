"""bench/home_scale.py at a small size through a real server (slow: a `lorastudio serve` child):
every step answers, each list counts what the home holds, the run deleted goes with its files.
The numbers of the full size (2,000 runs, 20,000 images) are RELIABILITY's session 34 home at
scale audit; the default tests that bound each request's work are tests/api/test_api_home_scale.py,
tests/unit/jobs/test_leftovers_scale.py and tests/unit/jobs/test_gallery_scale.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.home_build import Scale, output_name
from bench.home_scale import run

pytestmark = pytest.mark.slow


def test_the_home_scale_bench_runs_every_step(tmp_path: Path) -> None:
    scale = Scale(runs=60, heavy_every=20, checkpoints=5, samples=20, gallery=150, datasets=5, metrics=2)
    rows = run(tmp_path / "home", scale, clients=2, rounds=2)
    by_step = {r["step"]: r for r in rows}
    asked = [r for r in rows if r["status"]]
    assert asked and all(r["status"] == 200 for r in asked), [r for r in asked if r["status"] != 200]
    assert by_step["heavy run samples (20)"]["bytes"] > 0
    assert all(r["server_cpu_s"] >= 0 and r["peak_mb"] > 0 for r in rows)
    assert not (tmp_path / "home" / "outputs" / output_name(scale.heavy_every)).exists()
