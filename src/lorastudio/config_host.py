"""The rules of what a host can run: the compile modes, attention kernels and optimizers a
device type has, the GPUs num_gpus needs, the memory plan settings that need CUDA
(memory_budget_gb, offload_blocks) and the tracker packages report_to needs (each a FieldProblem
naming the setting when it cannot). One rule each behind the job service's host check
(jobs/host_rules.host_problems, and raw_host_problems on a config with other problems, so that
they all come in one answer), the preflight, the engine's own checks and the choices /api/info
serves the UI (config_choices.host_choices). No torch: nothing is imported to decide."""

from __future__ import annotations

import importlib.util

from lorastudio.errors import FieldProblem

# compile modes that need CUDA (refused elsewhere); "auto" compiles on CUDA only
COMPILE_NEEDS_CUDA: tuple[str, ...] = ("on", "wide")


# torch.compile's Inductor writes its GPU kernels in Triton, which runs on compute capability 7.0+
# (Volta): below it (Pascal, a GTX 1080) the first compiled call raises GPUTooOldForTriton
COMPILE_MIN_CAPABILITY = (7, 0)


def compile_device_problems(
    mode: str, device_type: str, capability: tuple[int, int] | None = None, gpu_name: str = "this GPU"
) -> list[FieldProblem]:
    """Why TrainConfig.compile `mode` cannot run on a `device_type` device (empty when it can):
    "on" and "wide" need CUDA, and on a GPU of known compute `capability` (`gpu_name` names it)
    COMPILE_MIN_CAPABILITY. The one rule behind the job service's host check, the preflight, the
    engine's check and the host's choices."""
    if mode in COMPILE_NEEDS_CUDA and device_type != "cuda":
        return [
            FieldProblem(
                "compile",
                f"{mode!r} needs a CUDA GPU (the training device is {device_type}); "
                "regional torch.compile is a GPU speed feature: use 'off' or 'auto' here",
            )
        ]
    if mode in COMPILE_NEEDS_CUDA and not _compiles_on(capability):
        major, minor = capability or (0, 0)
        return [
            FieldProblem(
                "compile",
                f"{mode!r} needs a GPU of compute capability 7.0 or newer (torch.compile's kernels are"
                f" Triton's); {gpu_name} is {major}.{minor}: use 'off' or 'auto' (which does not compile there)",
            )
        ]
    return []


def compile_runs(mode: str, device_type: str, capability: tuple[int, int] | None = None) -> bool:
    """Whether TrainConfig.compile `mode` compiles on a device of `device_type` ("cuda", "cpu",
    ...) of compute `capability` (None: not known): "on" / "wide" always (they are refused
    without CUDA or below COMPILE_MIN_CAPABILITY), "auto" on a CUDA GPU that has Triton (7.0+ or
    not known), "off" never."""
    return mode in COMPILE_NEEDS_CUDA or (
        mode == "auto" and device_type == "cuda" and _compiles_on(capability)
    )


def _compiles_on(capability: tuple[int, int] | None) -> bool:
    """Whether a CUDA GPU of compute `capability` runs torch.compile's kernels (None: not known, yes)."""
    return capability is None or tuple(capability) >= COMPILE_MIN_CAPABILITY


# SDPA kernels by the device types that have one (any other backend runs anywhere); fa4 also needs
# a Hopper / Blackwell GPU and flash_attn.cute, which the engine checks (training/speed/attention_fa4.py)
ATTENTION_DEVICES: dict[str, tuple[str, ...]] = {
    "cudnn": ("cuda",),
    "efficient": ("cuda",),
    "fa4": ("cuda",),
    "flash": ("cuda", "cpu"),  # torch has a CPU flash kernel, none for MPS
}


# The CUDA compute capabilities of the kernels that need one: torch's flash and cuDNN SDPA kernels
# take sm80-sm121 (aten sdp_utils: below, torch warns and runs the next backend, so a T4 asked for
# 'cudnn' trained on another kernel than the one it named); FA4 (flash_attn.cute) Hopper and
# Blackwell only (training/speed/attention_fa4.SUPPORTED_MAJORS).
ATTENTION_MIN_CAPABILITY: dict[str, tuple[int, int]] = {"cudnn": (8, 0), "flash": (8, 0), "fa4": (9, 0)}
FA4_MAJORS: tuple[int, ...] = (9, 10, 11, 12)


def attention_device_problems(
    backend: str, device_type: str, capability: tuple[int, int] | None = None, gpu_name: str = "this GPU"
) -> list[FieldProblem]:
    """Why TrainConfig.attention_backend `backend` has no kernel on a `device_type` device (empty
    when it has): the rule behind training/speed/attention.attention_problems and the host's choices.
    On CUDA with the GPU's compute `capability` known (`gpu_name` names it), also the kernels
    that need a newer GPU (ATTENTION_MIN_CAPABILITY; fa4: FA4_MAJORS; its package is the
    engine's check)."""
    if device_type in ATTENTION_DEVICES.get(backend, (device_type,)):
        if device_type != "cuda" or capability is None or backend not in ATTENTION_MIN_CAPABILITY:
            return []
        major, minor = capability
        if backend == "fa4" and major not in FA4_MAJORS:
            return [
                FieldProblem(
                    "attention_backend",
                    f"'fa4' (FlashAttention-4) runs on Hopper (sm90) and Blackwell (sm100+) GPUs; {gpu_name} "
                    f"is sm{major}{minor}: use 'auto'",
                )
            ]
        if backend != "fa4" and capability < ATTENTION_MIN_CAPABILITY[backend]:
            return [
                FieldProblem(
                    "attention_backend",
                    f"torch's '{backend}' attention kernel needs compute capability 8.0 or newer; {gpu_name} is "
                    f"{major}.{minor}: use 'auto' or 'efficient'",
                )
            ]
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


def gpu_count_problems(num_gpus: int, gpu_count: int) -> list[FieldProblem]:
    """Why TrainConfig.num_gpus cannot run on a host of `gpu_count` CUDA GPUs (empty when it can):
    one torchrun process per GPU. (The job service skips it when settings.cpu_data_parallel runs
    the ranks as gloo processes on the CPU; the CLI has its own terms, cli/train_check.)"""
    if num_gpus <= 1 or gpu_count >= num_gpus:
        return []
    return [
        FieldProblem(
            "num_gpus",
            f"num_gpus={num_gpus} needs {num_gpus} CUDA GPUs (one torchrun process "
            f"per GPU), but this host has {gpu_count}; use at most {max(gpu_count, 1)}",
        )
    ]


def memory_budget_problems(memory_budget_gb: float | None, device_type: str) -> list[FieldProblem]:
    """Why TrainConfig.memory_budget_gb cannot be honoured on a `device_type` device (empty when
    it can): a budget is measured in GPU memory, so it needs CUDA."""
    if memory_budget_gb is None or device_type == "cuda":
        return []
    return [
        FieldProblem(
            "memory_budget_gb",
            f"a memory budget is measured on a CUDA GPU; this run is on the {device_type}: "
            "remove it (and set the plan settings yourself)",
        )
    ]


def offload_problems(offload_blocks: int | None, device_type: str) -> list[FieldProblem]:
    """Why TrainConfig.offload_blocks cannot be honoured on a `device_type` device (empty when it
    can): block swap moves weights between CPU RAM and a CUDA GPU (training/planning/block_swap.py)."""
    if not offload_blocks or device_type == "cuda":
        return []
    where = "the CPU" if device_type == "cpu" else f"a {device_type} device"
    return [
        FieldProblem(
            "offload_blocks",
            f"block swap moves weights between CPU RAM and a GPU; this run is on {where} (use 0)",
        )
    ]


# report_to name -> (module that must be importable, extra that installs it)
TRACKERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}


def tracker_problems(report_to: list[str]) -> list[FieldProblem]:
    """A problem for each tracker of TrainConfig.report_to whose package is not installed (found
    with importlib.util.find_spec: nothing is imported)."""
    problems = []
    for name in report_to:
        module, extra = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            problems.append(
                FieldProblem(
                    "report_to",
                    f"{name} needs the {module} package, which is not installed: "
                    f"pip install 'lorastudio[{extra}]' (or leave {name} out of report_to)",
                )
            )
    return problems
