"""Where a GPU step's idle time goes: the gaps between consecutive kernels of a torch profiler
trace, and which of them the GPU spent waiting for the host to launch the next kernel.

A gap before kernel K is *launch-bound* when the host's launch call of K started after the GPU
had finished everything before K (the queue was empty: the host was late), else the GPU waited
on something else (a dependency across streams, a copy, an event). `gap_summary` works on plain
tuples so that it can be checked without a GPU; `kineto_gaps` extracts them from a profile taken
with ProfilerActivity.CUDA (and, for `cpu_ranges`, ProfilerActivity.CPU).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# gap sizes (ns) of the histogram: up to 2 us is the spacing of back-to-back dependent kernels
# on one stream, the rest is the GPU waiting for something
BUCKETS_NS = (2_000, 10_000, 100_000)


class Kernel(NamedTuple):
    start_ns: int
    end_ns: int
    name: str
    launched_ns: int | None  # when the host's launch call started (None: not matched)


class CpuRange(NamedTuple):
    start_ns: int
    end_ns: int
    name: str


def gap_summary(
    kernels: list[Kernel], steps: int, cpu_ranges: list[CpuRange] | None = None, top: int = 8
) -> dict[str, Any]:
    """Per-step totals over `kernels` (any order; `steps` steps profiled): span_ms (first kernel
    start to last end), busy_ms (union of kernel time), idle_ms (gaps of MIN_GAP_NS or more),
    launch_bound_ms (the part of those gaps whose next kernel was launched after the GPU went
    idle), gaps (their count) and `top`: the longest gaps as [ms, kernel before (the last to end), kernel after,
    launch-bound, the innermost CPU ranges open when the gap began (when `cpu_ranges` given)];
    `by_size`: per gap size bucket ("<2us", "2-10us", "10-100us", ">=100us") the gaps per step
    and their ms per step. Every gap counts, back-to-back spacing included."""
    if not kernels:
        return {"kernels": 0}
    ordered = sorted(kernels)
    first = ordered[0].start_ns
    busy_end, busy, idle, late, count = first, 0, 0, 0, 0
    prev = ""
    labels = ("<2us", "2-10us", "10-100us", ">=100us")
    sizes = {label: [0, 0] for label in labels}  # label -> [count, ns]
    found: list[tuple[int, str, str, bool, int]] = []
    for k in ordered:
        if k.start_ns > busy_end:
            gap = k.start_ns - busy_end
            size = sizes[labels[sum(gap >= b for b in BUCKETS_NS)]]
            size[0] += 1
            size[1] += gap
            bound = k.launched_ns is not None and k.launched_ns >= busy_end
            idle += gap
            late += gap if bound else 0
            count += 1
            found.append((gap, prev, k.name, bound, busy_end))
        busy += max(0, k.end_ns - max(k.start_ns, busy_end))
        if k.end_ns >= busy_end:  # the gap after this point follows the kernel that ends last
            busy_end, prev = k.end_ns, k.name
    found.sort(key=lambda g: -g[0])
    rows = []
    for gap, before, after, bound, at in found[:top]:
        row: list[Any] = [round(gap / 1e6, 3), before[:70], after[:70], bound]
        if cpu_ranges is not None:
            row.append(_open_ranges(cpu_ranges, at))
        rows.append(row)
    ms = 1e6 * steps
    return {
        "span_ms": round((busy_end - first) / ms, 2),
        "busy_ms": round(busy / ms, 2),
        "idle_ms": round(idle / ms, 2),
        "launch_bound_ms": round(late / ms, 2),
        "gaps": round(count / steps, 1),
        "by_size": {k: [round(n / steps, 1), round(ns / ms, 2)] for k, (n, ns) in sizes.items()},
        "launches_matched": sum(k.launched_ns is not None for k in kernels),
        "kernels": len(kernels),
        "top": rows,
    }


def _open_ranges(ranges: list[CpuRange], at_ns: int, innermost: int = 3) -> list[str]:
    """Names of the (at most `innermost`) shortest CPU ranges open at `at_ns`."""
    open_now = [r for r in ranges if r.start_ns <= at_ns <= r.end_ns]
    open_now.sort(key=lambda r: r.end_ns - r.start_ns)
    return [r.name[:60] for r in open_now[:innermost]]


def kineto_gaps(prof: Any, steps: int, with_cpu: bool = False) -> dict[str, Any]:
    """gap_summary of a finished torch.profiler.profile: kernels (and memcpy / memset) on the
    GPU, matched to their launch calls through the trace's correlation ids."""
    from torch.autograd import DeviceType

    events = prof.profiler.kineto_results.events()
    launches: dict[int, int] = {}
    ranges: list[CpuRange] = []
    gpu = []
    for e in events:
        if e.device_type() == DeviceType.CUDA:
            gpu.append(e)
        elif e.name().startswith(("cudaLaunch", "cuLaunch", "cudaMemcpy", "cudaMemset", "cudaGraphLaunch")):
            launches[e.correlation_id()] = e.start_ns()
        elif with_cpu and e.duration_ns() > 0:
            ranges.append(CpuRange(e.start_ns(), e.start_ns() + e.duration_ns(), e.name()))
    kernels = []
    for e in gpu:
        launched = launches.get(e.linked_correlation_id()) or launches.get(e.correlation_id())
        kernels.append(Kernel(e.start_ns(), e.start_ns() + e.duration_ns(), e.name(), launched))
    return gap_summary(kernels, steps, ranges if with_cpu else None)
