"""Device and dtype choice for a run, and the run-scoped numeric settings (TF32, SDPA backends).

`pick_device` / `pick_dtype` raise ConfigError for what this host cannot do, so preflight can
report it before anything loads. `run_numerics` sets process-wide torch flags for the run and
restores them afterwards, whatever happens inside.

base_precision values: fp32 / bf16 / fp16 store and compute the frozen base in that dtype;
fp8 keeps bf16 weights and runs the repeated blocks' linears as fp8 matmuls (a CUDA GPU of
compute capability >= 8.9: Ada / Hopper, the first with fp8 tensor cores); int8 / nf4 store
those weights quantised (QLoRA) and compute in bf16, on the CPU as on CUDA
(training/planning/quantize.py applies them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.speed.attention import restore_attention_state, saved_attention_state

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Precisions whose frozen base computes in bf16 whatever they store (fp8: bf16 weights, fp8
# matmuls; int8 / nf4: quantised weights, dequantised to bf16 for each matmul).
BF16_COMPUTE = frozenset({"fp8", "int8", "nf4"})
QUANTISED = frozenset({"int8", "nf4"})
FP8_MIN_CAPABILITY = (8, 9)  # Ada (8.9) and Hopper (9.0) are the first GPUs with fp8 tensor cores
BF16_MIN_CAPABILITY = (8, 0)  # Ampere (8.0) is the first with bf16 tensor cores (jobs/hardware.py's rule)


def pick_device(device: str | None, field: str = "device") -> torch.device:
    """The training device: `device` if given (e.g. "cpu", "cuda", "cuda:1"), else the first CUDA
    GPU when there is one, else the CPU. Raises ConfigError for an unknown or unavailable device,
    its problem named `field` (the CLI passes "--device", as its other options are named)."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (
        RuntimeError
    ):  # torch's words list every device type it knows (opengl, fpga, ...): none trains here
        raise ConfigError(
            [FieldProblem(field, f"unknown device {device!r}: use cpu, cuda or cuda:N")]
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError([FieldProblem(field, f"{device!r} requested but no CUDA GPU is available")])
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError([FieldProblem(field, f"{device!r}: only {torch.cuda.device_count()} GPU(s)")])
    elif dev.type != "cpu":
        raise ConfigError([FieldProblem(field, f"unsupported device type {dev.type!r} (use cpu or cuda)")])
    return dev


def is_quantised(base_precision: str) -> bool:
    """True for the precisions that store the frozen base quantised (int8, nf4)."""
    return base_precision in QUANTISED


def bf16_capable(device: torch.device) -> bool:
    """Whether `device` computes in bf16: a CUDA GPU of compute capability >= 8.0 (ROCm: any).
    Not torch.cuda.is_bf16_supported(): it asks the current device, not `device` (a box of an
    RTX 3090 and an RTX 2080 Ti training on the second), and says yes on sm_75 (a T4, an RTX
    20xx) where a bf16 tensor can be made but no tensor core computes it (emulated, slow), while
    the studio's preflight and checks (jobs/hardware.precisions_for) say no there."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    if torch.version.hip:
        return True
    return torch.cuda.get_device_capability(device) >= BF16_MIN_CAPABILITY


def fp8_capable(device: torch.device) -> bool:
    """Whether `device` runs fp8 matmuls: a CUDA GPU of compute capability >= 8.9."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= FP8_MIN_CAPABILITY


def precision_problems(base_precision: str, device: torch.device) -> list[FieldProblem]:
    """Why `base_precision` cannot run on `device` (empty list when it can): fp16 needs CUDA;
    bf16 (and int8 / nf4 / fp8, which compute in bf16) need bf16 support on a GPU (`bf16_capable`:
    compute capability 8.0+); fp8 needs a CUDA GPU of compute capability >= 8.9."""
    if base_precision == "fp16" and device.type != "cuda":
        return [FieldProblem("base_precision", "fp16 needs a CUDA GPU; use fp32 (or bf16) on the CPU")]
    if base_precision == "fp8":
        return _fp8_problems(device)
    bf16_needed = base_precision == "bf16" or base_precision in QUANTISED
    if bf16_needed and device.type == "cuda" and not bf16_capable(device):
        major, minor = torch.cuda.get_device_capability(device)
        card = f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor}, bf16 from 8.0)"
        if base_precision == "bf16":
            return [FieldProblem("base_precision", f"{card} does not support bf16; use fp16 or fp32")]
        return [
            FieldProblem(
                "base_precision",
                f"{base_precision} computes in bf16, which {card} does not support; use fp16 or fp32",
            )
        ]
    return []


def _fp8_problems(device: torch.device) -> list[FieldProblem]:
    need = "fp8 needs an NVIDIA GPU of compute capability 8.9 or newer (Ada / Hopper fp8 tensor cores)"
    if device.type != "cuda":
        return [
            FieldProblem("base_precision", f"{need}; this run is on the {device.type}: use bf16, int8 or nf4")
        ]
    if not fp8_capable(device):
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        return [
            FieldProblem(
                "base_precision",
                f"{need}; {name} has compute capability {major}.{minor}: use bf16, int8 or nf4",
            )
        ]
    return []


def pick_dtype(base_precision: str, device: torch.device) -> torch.dtype:
    """The COMPUTE dtype of the frozen base (the dtype it is loaded in, before any quantisation):
    auto = bf16 on a bf16-capable GPU, else fp32; fp8 / int8 / nf4 = bf16; fp32 / bf16 / fp16 as
    named. Raises ConfigError when the precision is not available on `device`."""
    problems = precision_problems(base_precision, device)
    if problems:
        raise ConfigError(problems)
    if base_precision == "auto":
        if bf16_capable(device):
            return torch.bfloat16
        return torch.float32
    if base_precision in BF16_COMPUTE:
        return torch.bfloat16
    return _DTYPES[base_precision]


@contextmanager
def run_numerics(enable_tf32: bool, device: torch.device) -> Iterator[None]:
    """For the duration of the block: fp32 matmul precision "high" (TF32 on Ampere+) and cuDNN
    TF32 when `enable_tf32`, else "highest" and no TF32; on CUDA the cuDNN SDPA backend is
    disabled (torch's default since 2.5.1; it crashed FLUX.1's step on the H200 until the
    engine handed it contiguous gradients) until training.speed.attention.apply_attention chooses
    otherwise. Every flag (SDPA ones and their order included) is restored on exit."""
    prev_precision = torch.get_float32_matmul_precision()
    prev_cudnn_tf32 = torch.backends.cudnn.allow_tf32
    prev_attention = saved_attention_state()
    torch.set_float32_matmul_precision("high" if enable_tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = enable_tf32
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(prev_precision)
        torch.backends.cudnn.allow_tf32 = prev_cudnn_tf32
        restore_attention_state(prev_attention)


def free_accelerator_memory(device: torch.device) -> None:
    """Collect garbage and hand cached accelerator memory back (call after dropping a model)."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def peak_memory_gb(device: torch.device) -> float:
    """Peak memory so far: the accelerator's allocated peak on CUDA, the process RSS peak on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1024**3
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB on Linux
