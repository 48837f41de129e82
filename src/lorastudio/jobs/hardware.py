"""What this host can run: the accelerator, how many GPUs, and the base precisions it supports.

torch is imported lazily (first call) and the answer cached; nothing here allocates GPU memory
beyond the driver query. A host that cannot have a CUDA device (`cuda_impossible`: macOS, or Linux
without the NVIDIA kernel driver's /proc/driver/nvidia nor ROCm's /dev/kfd, which torch.cuda also
drives) is answered without importing torch: the server's config checks stay torch-free there.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# The same thresholds as the engine's training/precision.py (the job service does not import
# the engine): bf16 on compute capability 8.0+, fp8 matmuls on 8.9+ (Ada / Hopper).
_BF16_MIN_CAPABILITY = (8, 0)
_FP8_MIN_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class HostInfo:
    """device: "cuda" or "cpu"; name: the GPU name or "cpu"; memory_gb: memory of GPU 0 (None on
    CPU); precisions: the base_precision values a run can use here ("auto" always); gpu_count:
    CUDA GPUs visible to this process (0 on a CPU host); gpu_memory_gb: the total memory of each
    of them in GiB, by index (the caption jobs' placement, jobs/caption_gpu.py)."""

    device: str
    name: str
    memory_gb: float | None
    precisions: tuple[str, ...]
    gpu_count: int = 0
    gpu_memory_gb: tuple[float, ...] = ()

    def public(self) -> dict[str, Any]:
        """HostOut: with the optimizers and compile modes a run can use here (config_choices)."""
        from lorastudio.config_choices import host_choices

        return {
            "device": self.device,
            "name": self.name,
            "memory_gb": self.memory_gb,
            "precisions": list(self.precisions),
            "gpu_count": self.gpu_count,
            **host_choices(self.device),
        }


def precisions_for(device: str, capability: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The base_precision values a device runs. CPU: fp32, bf16 and the quantised int8 / nf4
    (bf16 compute). CUDA of compute `capability`: fp32, fp16; bf16, int8 and nf4 from 8.0 (they
    compute in bf16); fp8 from 8.9 (fp8 tensor cores)."""
    if device != "cuda":
        return ("auto", "fp32", "bf16", "int8", "nf4")
    cap = capability or (0, 0)
    precisions = ["auto", "fp32", "fp16"]
    if cap >= _BF16_MIN_CAPABILITY:
        precisions.append("bf16")
    if cap >= _FP8_MIN_CAPABILITY:
        precisions.append("fp8")
    if cap >= _BF16_MIN_CAPABILITY:
        precisions += ["int8", "nf4"]
    return tuple(precisions)


def cuda_impossible() -> bool:
    """True when this host certainly has no device torch.cuda could use, known without importing
    torch: macOS (no CUDA build of torch), or Linux with neither the NVIDIA kernel driver
    (/proc/driver/nvidia) nor the ROCm one (/dev/kfd; torch.cuda runs ROCm too). Elsewhere
    (Windows, a Linux host with a driver) only torch can tell, so False."""
    if sys.platform == "darwin":
        return True
    return sys.platform.startswith("linux") and not (
        os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/kfd")
    )


@lru_cache(maxsize=1)
def host_info() -> HostInfo:
    """Probe the accelerator once (GPU 0 names the host; gpu_count counts every visible GPU);
    without torch when `cuda_impossible`."""
    if cuda_impossible():
        return HostInfo("cpu", "cpu", None, precisions_for("cpu"), gpu_count=0)
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        count = torch.cuda.device_count()
        return HostInfo(
            "cuda",
            props.name,
            round(props.total_memory / 2**30, 1),
            precisions_for("cuda", (props.major, props.minor)),
            gpu_count=count,
            gpu_memory_gb=tuple(
                round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1) for i in range(count)
            ),
        )
    return HostInfo("cpu", "cpu", None, precisions_for("cpu"), gpu_count=0)


def resolved_dtype(base_precision: str, host: HostInfo) -> str:
    """The precision the frozen base runs in: "auto" is bf16 on a bf16-capable GPU, else fp32;
    any other value is returned as given (fp8 / int8 / nf4 compute in bf16: see
    training/precision.py)."""
    if base_precision != "auto":
        return base_precision
    return "bf16" if host.device == "cuda" and "bf16" in host.precisions else "fp32"
