"""The machine and numerics a checkpoint was written on, and what a resume on others means
(RELIABILITY 1873).

A resumed run is bitwise the uninterrupted one only where the same sums round the same way: the
same device kind (an H200's kernels are not an H100's, nor the CPU's) and the same dtype path
(the compute dtype the plan's base_precision gave on that device: `auto` is bf16 on a
bf16-capable GPU, fp32 elsewhere; fp32 matmul precision, TF32 or not). state.pt records both
("device_name": torch.cuda.get_device_name of the training device, or its type, "cpu";
"dtype_path": `dtype_path`), and a resume under others gives a RunWarning naming both (as a CPU
resume at another thread count does: snapshot.thread_note, RELIABILITY 1791). A checkpoint
written before (no such keys) says nothing, as before. Device-independent otherwise: the names
are what torch reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch


def device_name(device: torch.device) -> str:
    """The training device's kind as torch names it: the CUDA card's name ("NVIDIA H100 80GB
    HBM3"), else the device type ("cpu", "mps")."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    return device.type


def dtype_path(dtype: torch.dtype) -> str:
    """The run's numerics path: its compute dtype and the fp32 matmul precision now in force
    ("bfloat16 compute, fp32 matmul high"; training.precision.run_numerics sets the latter)."""
    return f"{str(dtype).removeprefix('torch.')} compute, fp32 matmul {torch.get_float32_matmul_precision()}"


def machine_notes(checkpoint: Path, state: Mapping[str, Any], device_now: str, path_now: str) -> list[str]:
    """What a resume on `device_now` with `path_now` means for exactness against what `state`
    (the checkpoint's state.pt) recorded: one note per difference, none where it is the same or
    was not recorded (an older checkpoint; an empty `path_now`: not known here)."""
    notes = []
    device = state.get("device_name")
    if isinstance(device, str) and device != device_now:
        notes.append(
            f"this resume runs on {device_now}, {checkpoint.name} was written on {device}: another device kind "
            "rounds the same sums otherwise, so the steps from here are close to the uninterrupted run's, not "
            f"bitwise; to continue exactly resume on {device}"
        )
    path = state.get("dtype_path")
    if isinstance(path, str) and path_now and path != path_now:
        notes.append(
            f"this resume computes in {path_now}, {checkpoint.name} was written computing in {path}: the steps "
            "from here round otherwise, close to the uninterrupted run's, not bitwise; to continue exactly "
            "resume where the checkpoint's dtype path is the one chosen (its device kind, its base_precision)"
        )
    return notes
