"""A profiled step's CUDA time by kernel class (fp8 / bf16 GEMMs, attention, Inductor's fused
kernels), its top kernels, and where the GPU sat idle (bench/gaps.py): what bench.probe_speed adds
to a row with PROBE_PROFILE set (PROBE_PROFILE=cpu also names the host's work in each gap)."""

from __future__ import annotations

import os
from typing import Any


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel by its name: triton_fused (Inductor's kernels, also those named
    after the _scaled_mm whose casts they hold), attention (flash / cuDNN SDPA), fp8_gemm (cuBLAS'
    nvjet kernels with e4m3 operands, "qq" in their type letters), gemm, other."""
    low = name.lower()
    if low.startswith("triton"):
        return "triton_fused"
    if "flash" in low or "fmha" in low or "attention" in low or "sdpa" in low:
        return "attention"
    if (low.startswith("nvjet") and "_qq" in low) or "e4m3" in low or "f8" in low:
        return "fp8_gemm"
    if "gemm" in low or "nvjet" in low or "xmma" in low or "cutlass" in low or "sm90" in low:
        return "gemm"
    return "other"


def kernel_profile(step: Any, steps: int = 2, top: int = 12) -> dict[str, Any]:
    """Share of CUDA time per kernel class over `steps` steps, the top kernels, and where the GPU
    sat idle (bench/gaps.py; PROBE_PROFILE=cpu also names the host's open ranges in each gap)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with_cpu = os.environ.get("PROBE_PROFILE") == "cpu"  # CPU ops too: names the host's work in gaps
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if with_cpu else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [(e.key, e.self_device_time_total) for e in prof.key_averages() if e.self_device_time_total > 0]
    total = sum(t for _, t in kernels) or 1.0
    classes: dict[str, float] = {}
    for name, t in kernels:
        cls = kernel_class(name)
        classes[cls] = classes.get(cls, 0.0) + t
    kernels.sort(key=lambda kv: -kv[1])
    return {
        "ms_per_step": round(total / steps / 1000, 1),
        "share": {k: round(v / total, 3) for k, v in sorted(classes.items(), key=lambda kv: -kv[1])},
        "top": [[name[:90], round(t / total, 3)] for name, t in kernels[:top]],
        "gaps": _gaps_or_error(prof, steps, with_cpu),
    }


def _gaps_or_error(prof: Any, steps: int, with_cpu: bool) -> dict[str, Any]:
    from bench.gaps import kineto_gaps

    try:
        return kineto_gaps(prof, steps, with_cpu)
    except Exception as err:  # noqa: BLE001 -- a benchmark: a trace it cannot read is data
        return {"error": f"{type(err).__name__}: {str(err)[:200]}"}
