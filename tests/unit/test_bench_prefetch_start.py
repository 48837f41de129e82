"""bench/prefetch_start.py: its run config, its page-cache drop and residency check, and a whole
round on the tiny FLUX.1 pipeline (slow)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bench import e2e_build, prefetch_start


def test_the_cpu_run_is_one_step_without_samples_or_checkpoints(tmp_path: Path) -> None:
    cfg = prefetch_start.run_config(tmp_path, "flux", "cpu")
    assert cfg["steps"] == 1 and cfg["resolution"] == 32 and cfg["max_sequence_length"] == 16
    assert not {"sample_prompts", "sample_every", "save_every"} & set(cfg)
    cuda = prefetch_start.run_config(tmp_path, "flux", "cuda")
    assert cuda["resolution"] == 1024 and "max_sequence_length" not in cuda  # the run's own defaults


def test_a_drop_empties_the_page_cache_of_the_files_and_a_read_fills_it(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    with path.open("wb") as handle:
        handle.write(os.urandom(4 * 2**20))
        os.fsync(handle.fileno())
    prefetch_start.drop([path])
    if prefetch_start.resident_share([path]) > prefetch_start.MAX_RESIDENT:
        pytest.skip("this file system keeps its pages (a tmpfs)")
    read = prefetch_start.cold_read([path])
    assert read["resident_before"] == 0.0 and read["gb"] == 0.0  # 4 MiB rounds to 0.00 GB
    assert prefetch_start.resident_share([path]) == 1.0


@pytest.mark.slow  # ~1-2 min on 2 shared cores: three lorastudio train processes
def test_a_round_on_the_tiny_pipeline_times_both_runs(tmp_path: Path) -> None:
    e2e_build.build_tiny(tmp_path, "flux")
    assert prefetch_start.main(["run", str(tmp_path), "--rounds", "1", "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "prefetch_start-run.json").read_text())
    (row,) = result["rounds"]
    for mode in ("off", "on"):
        assert row[mode]["resident_before"] <= prefetch_start.MAX_RESIDENT
        assert 0 < row[mode]["to_first_read_s"] < row[mode]["to_first_step_s"]
    assert row["on"]["prefetch"] and not row["off"]["prefetch"]
    assert result["summary"]["ratio_first_step_to_cold_load (off)"] > 0
