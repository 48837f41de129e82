"""This CPU's matrix-multiply rate at the run's threads, probed at a CPU run's end and kept in its
wall-time record (training/planning/run_timings.py), so the preflight's forecast splits a record into its
fixed and work parts at this host's rate (jobs/time_rate.device_rate: CPU_WORK_SHARE x the
probes' median) instead of one constant measured on another CPU.

Why hand-written: a FLOP rate is what the forecast's work is counted in, and no library reports
one for a host; torch.utils.benchmark would time the same matmul with more machinery. The probe
is a 384 x 384 fp32 matmul (its operands fit the cache, BLAS runs near its peak), repeated in
bursts of PROBE_BURST_S of the process's CPU time, timed on that clock (all threads): the
threads' rate where nothing else runs, whatever the shared host's load (a wall-clock probe of the
same bursts gave 14-63 GFLOP/s one thread at loads of 10-13, RESULTS note 46); the fastest
burst counts. It costs ~PROBE_BURSTS x PROBE_BURST_S of CPU time (more wall time under load),
once per process and thread count; it is written into each CPU run's record with its threads and torch version, so a record
carries the rate of the host, torch and threads it ran with, and a forecast takes the median of
the newest records' probes.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch

PROBE_SIDE = 384
PROBE_BURSTS = 4
PROBE_BURST_S = 0.03


def probe_cpu_rate() -> dict[str, Any]:
    """{"matmul_flops": FLOPs per CPU second of the fastest burst x torch's intra-op threads,
    "threads": those threads, "torch": its version}: a PROBE_SIDE-square fp32 matmul on the CPU
    at the current threads, probed once per process and thread count (the CPU clock's rate does
    not move with the host's load; a process that trains many runs, a test session, pays once).
    Draws nothing from torch's global RNG (train() emits Complete and returns right after it: a caller's next draw
    is the one it would have been without the probe)."""
    return dict(_probe(torch.get_num_threads()))


@functools.lru_cache(maxsize=8)
def _probe(threads: int) -> dict[str, Any]:
    """probe_cpu_rate's measure at `threads` (torch's current count, the cache's key)."""
    rng = torch.Generator().manual_seed(0)  # its own: the caller's global RNG stream is not drawn from
    a = torch.randn(PROBE_SIDE, PROBE_SIDE, generator=rng)  # [N, N]
    b = torch.randn(PROBE_SIDE, PROBE_SIDE, generator=rng)  # [N, N]
    with torch.no_grad():
        torch.mm(a, b)  # BLAS's first call: its threads and buffers
        best = float("inf")
        for _ in range(PROBE_BURSTS):
            count, start = 0, time.process_time()
            while (elapsed := time.process_time() - start) < PROBE_BURST_S:
                torch.mm(a, b)  # [N, N]
                count += 1
            best = min(best, elapsed / count)
    return {  # FLOPs per CPU second x the threads: the threads' rate where nothing else runs
        "matmul_flops": round(2 * PROBE_SIDE**3 / best * threads),
        "threads": threads,
        "torch": torch.__version__,
    }
