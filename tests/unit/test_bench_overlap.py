"""bench/denoiser_overlap.py sums up its two runs (its parent imports no torch: a CPU host runs it)."""

from __future__ import annotations

from bench import denoiser_overlap


def test_the_bench_imports_without_torch_and_compares_the_paths():
    runs = {
        "old": {"time_to_first_step_s": 12.0, "weights_load_total_s": 6.0, "end": "complete"},
        "new": {"time_to_first_step_s": 9.0, "weights_waited_s": {"denoiser": 1.5}, "end": "complete"},
        "old2": {"time_to_first_step_s": 13.0, "weights_load_total_s": 7.0, "end": "complete"},
        "new3": {"time_to_first_step_s": 10.0, "end": "complete"},
    }
    out = denoiser_overlap.summary(runs)
    assert out["ttfs_s"] == {"old": [12.0, 13.0], "new": [9.0, 10.0]}
    assert out["ttfs_new_less_old_s"] == -3.0
    assert out["ttfs_over_old_load"] == {"old": 1.92, "new": 1.46}
    assert out["new"]["weights_waited_s"] == {"denoiser": 1.5}
