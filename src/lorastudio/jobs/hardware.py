"""What this host can run: the accelerator and the base precisions it supports.

torch is imported lazily (first call) and the answer cached; nothing here allocates GPU memory
beyond the driver query.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class HostInfo:
    """device: "cuda" or "cpu"; name: the GPU name or "cpu"; memory_gb: GPU memory (None on CPU);
    precisions: the base_precision values a run can use here ("auto" always)."""

    device: str
    name: str
    memory_gb: float | None
    precisions: tuple[str, ...]

    def public(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "name": self.name,
            "memory_gb": self.memory_gb,
            "precisions": list(self.precisions),
        }


@lru_cache(maxsize=1)
def host_info() -> HostInfo:
    """Probe the accelerator once. CPU hosts run fp32 and bf16; CUDA adds fp16, and bf16 only
    on compute capability 8.0 or newer."""
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        precisions = ["auto", "fp32", "fp16"]
        if props.major >= 8:
            precisions.append("bf16")
        return HostInfo("cuda", props.name, round(props.total_memory / 2**30, 1), tuple(precisions))
    return HostInfo("cpu", "cpu", None, ("auto", "fp32", "bf16"))


def resolved_dtype(base_precision: str, host: HostInfo) -> str:
    """The dtype the frozen base runs in: "auto" is bf16 on a bf16-capable GPU, else fp32."""
    if base_precision != "auto":
        return base_precision
    return "bf16" if host.device == "cuda" and "bf16" in host.precisions else "fp32"
