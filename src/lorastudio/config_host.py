"""The rules of what a host can run: the compile modes, attention kernels and optimizers a
device type has (each a FieldProblem naming the setting when it has not). One rule each behind
the job service's host check, the preflight, the engine's own checks and the choices /api/info
serves the UI (config_choices.host_choices). No torch: nothing is imported to decide."""

from __future__ import annotations

import importlib.util

from lorastudio.errors import FieldProblem

# compile modes that need CUDA (refused elsewhere); "auto" compiles on CUDA only
COMPILE_NEEDS_CUDA: tuple[str, ...] = ("on", "wide")


def compile_device_problems(mode: str, device_type: str) -> list[FieldProblem]:
    """Why TrainConfig.compile `mode` cannot run on a `device_type` device (empty when it can):
    "on" and "wide" need CUDA. The one rule behind the job service's host check and preflight."""
    if mode in COMPILE_NEEDS_CUDA and device_type != "cuda":
        return [
            FieldProblem(
                "compile",
                f"{mode!r} needs a CUDA GPU (the training device is {device_type}); "
                "regional torch.compile is a GPU speed feature: use 'off' or 'auto' here",
            )
        ]
    return []


def compile_runs(mode: str, device_type: str) -> bool:
    """Whether TrainConfig.compile `mode` compiles on a device of `device_type` ("cuda", "cpu",
    ...): "on" / "wide" always (they are refused without CUDA), "auto" on CUDA, "off" never."""
    return mode in COMPILE_NEEDS_CUDA or (mode == "auto" and device_type == "cuda")


# SDPA kernels by the device types that have one (any other backend runs anywhere); fa4 also needs
# a Hopper / Blackwell GPU and flash_attn.cute, which the engine checks (training/attention_fa4.py)
ATTENTION_DEVICES: dict[str, tuple[str, ...]] = {
    "cudnn": ("cuda",),
    "efficient": ("cuda",),
    "fa4": ("cuda",),
    "flash": ("cuda", "cpu"),  # torch has a CPU flash kernel, none for MPS
}


def attention_device_problems(backend: str, device_type: str) -> list[FieldProblem]:
    """Why TrainConfig.attention_backend `backend` has no kernel on a `device_type` device (empty
    when it has): the rule behind training/attention.attention_problems and the host's choices."""
    if device_type in ATTENTION_DEVICES.get(backend, (device_type,)):
        return []
    if backend == "flash":
        return [
            FieldProblem("attention_backend", f"'flash' has no {device_type} kernel; use 'auto' or 'math'")
        ]
    return [
        FieldProblem(
            "attention_backend",
            f"'{backend}' is a CUDA kernel (the training device is {device_type}); use 'auto' or 'math'",
        )
    ]


BNB_OPTIMIZERS: tuple[str, ...] = ("adamw8bit", "lion8bit")


def optimizer_host_problems(optimizer: str, device_type: str) -> list[FieldProblem]:
    """Why `optimizer` cannot run on a `device_type` device here (empty when it can): the 8-bit
    optimizers need CUDA and the bitsandbytes package. The one rule behind preflight and the job
    service's host check; nothing is imported."""
    if optimizer not in BNB_OPTIMIZERS:
        return []
    if device_type != "cuda":
        return [
            FieldProblem(
                "optimizer",
                f"{optimizer!r} runs bitsandbytes' 8-bit CUDA kernels (the training device is {device_type}): "
                "use 'adamw', 'prodigy' or 'adafactor' here",
            )
        ]
    if importlib.util.find_spec("bitsandbytes") is None:
        return [
            FieldProblem(
                "optimizer",
                f"{optimizer!r} needs the bitsandbytes package, which is not installed: "
                "pip install 'lorastudio[bnb]'",
            )
        ]
    return []
