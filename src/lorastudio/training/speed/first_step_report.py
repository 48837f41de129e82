"""One log line after a run's first step on where the compile's time went (issue 31 item 1).

The time to the first step of a compiled run at real size is mostly its first step (RESULTS note
34: 8.8 s of 25.0 s with every graph in Inductor's on-disk cache). That step traces the repeated
blocks with Dynamo, looks up AOTAutograd's and Inductor's caches, loads the cached kernels and
only then runs. `log_first_step_compile` writes Dynamo's own per-function seconds
(`torch._dynamo.utils.compile_times`) and the caches' hit / miss counters to the training
worker's log once, so a GPU run says which of those it was without a profiler. It reads
counters only: nothing here changes what the run computes, and a run that never compiled (Dynamo
not imported) logs nothing.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger(__name__)

# the functions of Dynamo's table worth a line (their seconds summed over every compiled frame)
_KEYS = (
    "_compile.compile_inner",  # Dynamo: bytecode tracing, guards, and what it calls below
    "OutputGraph.call_user_compiler",  # the backend (AOTAutograd + Inductor, cached or not)
    "compile_fx_inner",  # Inductor per graph (a cache hit loads the compiled module)
    "AOTAutogradCache.inductor_load",  # a cache hit's compiled forward / backward, loaded
    "create_aot_dispatcher_function",  # AOTAutograd on a graph its cache did not give
    "aot_trace_joint_graph",  # of which: tracing the forward + backward graph
    "PyCodeCache.load_by_key_path",  # loading the generated modules (kernels) from disk
    "async_compile.wait",  # kernel compiles (a cold cache)
    "bytecode_tracing",  # Dynamo's tracing alone
    "fullgraph_capture",  # Dynamo's trace for a saved function (training/speed/precompile.py, a miss)
    "build_guards",
)
_COUNTERS = (
    ("inductor", "fxgraph_cache_hit"),
    ("inductor", "fxgraph_cache_miss"),
    ("aot_autograd", "autograd_cache_hit"),
    ("aot_autograd", "autograd_cache_miss"),
    ("aot_autograd", "autograd_cache_bypass"),  # a graph its cache will not take: traced each run
    ("aot_autograd", "autograd_cache_guard_miss"),
    ("stats", "unique_graphs"),
)


def first_step_compile_summary() -> dict[str, float] | None:
    """Dynamo's seconds per function of `_KEYS`, the cache counters of `_COUNTERS` and those of
    Dynamo's saved output (training/speed/precompile.py COUNTERS: hit, saved, fallback, guard_miss,
    load_s, trace_s) so far in this process; None when Dynamo was never imported (nothing compiled)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    seconds: dict[str, float] = {}
    for key, values in getattr(utils, "compilation_time_metrics", {}).items():
        name = key if isinstance(key, str) else str(key)
        if any(name.endswith(k) for k in _KEYS):
            seconds[name] = round(float(sum(values)), 3)
    for group, name in _COUNTERS:
        seconds[f"{group}.{name}"] = float(utils.counters[group][name])
    saved = sys.modules.get("lorastudio.training.speed.precompile")  # Dynamo's saved output: hits, misses
    if saved is not None:
        for name, value in saved.COUNTERS.items():
            seconds[f"precompile.{name}"] = round(float(value), 3)
    return seconds


def log_first_step_compile(step_seconds: float) -> None:
    """Log the first step's wall seconds with `first_step_compile_summary()` (INFO, once per run:
    the caller calls it after the run's first step only)."""
    summary = first_step_compile_summary()
    if summary is None:
        return
    parts = ", ".join(f"{k} {v:g}" for k, v in sorted(summary.items()))
    log.info("first step %.2f s; compile so far in this process: %s", step_seconds, parts)
