"""The config rules the web UI needs to offer only what the server accepts, in one JSON-able
object (/api/info's `config_rules`), built from the constants the rules themselves use, so the
UI holds no copy of them:

- which settings each choice of a select field reads (optimizer_problems, adapter_problems and
  loss_problems refuse the others' settings);
- the settings where an explicit null means off (config_resolve.NULL_MEANS_OFF: a family default
  does not replace it);
- the optimizers, compile modes and attention kernels a host can run (`host_choices`, served in
  HostOut: the rules the job service's host check and the preflight apply).

A family's refused family-specific settings are served per family (FamilyOut.refuses, from
config_resolve.refused_fields). No torch here.
"""

from __future__ import annotations

from typing import Any, get_args

from lorastudio.config_fields_objective import LossName
from lorastudio.config_fields_runtime import AttentionBackend, CompileMode
from lorastudio.config_fields_training import AdapterName, LrScheduler, OptimizerName
from lorastudio.config_host import attention_device_problems, compile_device_problems, optimizer_host_problems
from lorastudio.config_methods import HUBER_LOSSES, HUBER_OPTIONS
from lorastudio.config_rules import LOKR_OPTIONS, OPTIMIZER_OPTIONS
from lorastudio.config_schedule import SCHEDULER_OPTIONS


def choice_settings() -> dict[str, dict[str, list[str]]]:
    """{select field: {each of its choices: the settings only some choices read, that this one
    reads}}: a setting of another choice, set explicitly, is refused (it would be ignored)."""
    return {
        "optimizer": {o: list(OPTIMIZER_OPTIONS[o]) for o in get_args(OptimizerName)},
        "adapter": {a: list(LOKR_OPTIONS) if a == "lokr" else [] for a in get_args(AdapterName)},
        "loss": {loss: list(HUBER_OPTIONS) if loss in HUBER_LOSSES else [] for loss in get_args(LossName)},
        "lr_scheduler": {
            s: [name for name, owner in SCHEDULER_OPTIONS.items() if owner == s]
            for s in get_args(LrScheduler)
        },
    }


def config_rules_public() -> dict[str, Any]:
    """/api/info's `config_rules` (api.schemas.ConfigRulesOut)."""
    from lorastudio.config_resolve import NULL_MEANS_OFF

    return {"choice_settings": choice_settings(), "null_means_off": sorted(NULL_MEANS_OFF)}


def host_choices(device_type: str, capability: tuple[int, int] | None = None) -> dict[str, list[str]]:
    """The optimizer, compile and attention_backend values a run on a `device_type` device
    ("cuda", "cpu") of this machine can use, in the config's order: those optimizer_host_problems
    (the 8-bit ones need CUDA and bitsandbytes), compile_device_problems (on / wide need CUDA, 7.0+) and
    attention_device_problems (cudnn / efficient / fa4 need CUDA, flash CUDA or a CPU) do not
    refuse, the attention kernels for the GPU's compute `capability` where it is known (cudnn and
    flash from 8.0, fa4 on Hopper / Blackwell). 'wide' also needs a family with wider compile
    regions (FamilyOut.wide_compile); fa4 also flash_attn.cute (the run's start checks it)."""
    return {
        "optimizers": [o for o in get_args(OptimizerName) if not optimizer_host_problems(o, device_type)],
        "compile_modes": [
            m for m in get_args(CompileMode) if not compile_device_problems(m, device_type, capability)
        ],
        "attention_backends": [
            b for b in get_args(AttentionBackend) if not attention_device_problems(b, device_type, capability)
        ],
    }
