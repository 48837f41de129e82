"""bench/gaps.py: the idle time between a step's kernels, split by whether the host launched
the next kernel late."""

from __future__ import annotations

import pytest
import torch
from bench.gaps import CpuRange, Kernel, gap_summary, kineto_gaps
from torch.profiler import ProfilerActivity, profile

pytestmark = pytest.mark.slow  # the GPU bench harness on the CPU (bench/, not the product)

US = 10_000  # ns: times below in units of 10 us


def test_gaps_are_summed_per_step_and_split_by_late_launches():
    kernels = [
        Kernel(0, 100 * US, "gemm_a", 0),
        Kernel(100 * US + 50, 200 * US, "gemm_b", 50 * US),  # 0.5 us apart: back to back
        Kernel(150 * US, 180 * US, "overlapping", 60 * US),  # inside gemm_b's time: no gap
        Kernel(260 * US, 300 * US, "after_host", 230 * US),  # launched after the GPU went idle
        Kernel(310 * US, 400 * US, "after_wait", 120 * US),  # launched early: waited on something
    ]
    cpu = [CpuRange(150 * US, 280 * US, "Optimizer.step"), CpuRange(0, 500 * US, "step")]
    out = gap_summary(list(reversed(kernels)), steps=2, cpu_ranges=cpu)
    assert out["span_ms"] == 2.0 and out["gaps"] == 1.5  # 4 ms over 2 steps; 3 gaps / 2 steps
    assert out["idle_ms"] == 0.35 and out["launch_bound_ms"] == 0.3  # (0.6 + 0.1 + 5e-4) / 2, 0.6 / 2
    assert out["busy_ms"] == 1.65  # (4 - 0.7 ms) / 2
    assert out["by_size"] == {
        "<2us": [0.5, 0.0],
        "2-10us": [0, 0],
        "10-100us": [0, 0],
        ">=100us": [1.0, 0.35],
    }
    assert out["top"][0] == [0.6, "gemm_b", "after_host", True, ["Optimizer.step", "step"]]
    assert out["top"][1][:4] == [0.1, "after_host", "after_wait", False]
    assert gap_summary([], steps=1) == {"kernels": 0}


def test_a_cpu_profile_has_no_kernels_to_summarise():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = torch.randn(64, 64)
        (x @ x).sum()
    assert kineto_gaps(prof, steps=1, with_cpu=True) == {"kernels": 0}
