"""What a training request asks of this host, checked by the job service before any worker
starts (jobs/validation.validate_run for a new run, jobs/resume.py for a resume): compile and
attention kernels, memory_budget_gb / offload_blocks, 8-bit optimizers and trackers, num_gpus
and the data-parallel rules. The rules themselves are config_host's and
training/parallel_rules.py's; here they are applied to a parsed config (`host_problems`) or,
field by field, to a request whose config did not parse (`raw_host_problems`), so that they come
in the same answer as its other problems. No torch: the host's facts are jobs.hardware's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from lorastudio.cgroup_limits import shm_problems
from lorastudio.config import TrainConfig
from lorastudio.config_host import (
    attention_device_problems,
    compile_device_problems,
    gpu_count_problems,
    memory_budget_problems,
    offload_problems,
    optimizer_host_problems,
)
from lorastudio.errors import FieldProblem
from lorastudio.jobs.hardware import HostInfo, host_info
from lorastudio.jobs.run_host import host_for_run
from lorastudio.settings import Settings
from lorastudio.tracker_login import report_to_problems
from lorastudio.training.parallel_rules import data_parallel_problems


def host_problems(cfg: TrainConfig, settings: Settings, host: HostInfo | None = None) -> list[FieldProblem]:
    """Settings this server cannot run on its host: compile "on" / "wide" without CUDA; an attention
    kernel without one here (cudnn / efficient / fa4 need CUDA, flash CUDA or a CPU; cudnn and flash
    compute capability 8.0+, fa4 a Hopper / Blackwell GPU); num_gpus > 1 with
    fewer CUDA GPUs than that (unless settings.cpu_data_parallel runs the ranks as gloo
    processes on the CPU), a batch_size that does not divide by num_gpus (each rank takes an
    equal slice of every batch), or lora_dropout > 0 (see training/distributed.py: each rank
    would draw its own masks, which is not the maths of one process); memory_budget_gb or
    offload_blocks > 0 without CUDA; an 8-bit optimizer without CUDA and bitsandbytes; a
    report_to tracker whose package is not installed, or wandb online without an API key (the
    rules are config_host's and tracker_login's). `host`: the GPU facts as the run sees them
    (jobs/run_host.host_for_run; None: this host's, the visible GPUs' first as the service places
    the run, the weakest of its `num_gpus`)."""
    return _host_rules(cfg.model_dump(), set(), settings, host)


def raw_host_problems(
    raw: Mapping[str, Any], reported: set[str], settings: Settings, host: HostInfo | None = None
) -> list[FieldProblem]:
    """The rules of host_problems on a request whose config did not parse, so that they come in
    the same answer as its other problems: each field not already `reported` whose given value
    is valid by itself (TrainConfig's own field validation; else the schema reported it) is
    checked against this host; a field not given takes its schema default. Nothing is reported
    twice. `host` as host_problems'."""
    return _host_rules(raw, reported, settings, host)


def _host_rules(
    values: Mapping[str, Any], reported: set[str], settings: Settings, host: HostInfo | None
) -> list[FieldProblem]:
    """host_problems' rules on the fields of `values` that are valid and not `reported`."""
    if host is None:
        ranks = _valid_field(values, "num_gpus", reported)
        host = host_for_run(host_info(), None, ranks if isinstance(ranks, int) else 1)
    device = host.device
    problems: list[FieldProblem] = []
    rules: dict[str, Callable[[Any], list[FieldProblem]]] = {
        "compile": lambda mode: compile_device_problems(mode, device, host.capability, host.name),
        "attention_backend": lambda backend: attention_device_problems(  # here, not in the worker
            backend, device, host.capability, host.name
        ),
        "memory_budget_gb": lambda budget: memory_budget_problems(budget, device),
        "offload_blocks": lambda blocks: offload_problems(blocks, device),
        "optimizer": lambda name: optimizer_host_problems(name, device),  # 8-bit: CUDA + bitsandbytes
        # report_to: the tracker's package installed, W&B's key known (tracker_login.py)
        "report_to": lambda names: report_to_problems(names, settings),
    }
    if not settings.cpu_data_parallel:  # NCCL's ranks: the GPUs, and /dev/shm for NCCL's buffers
        rules["num_gpus"] = lambda count: gpu_count_problems(count, host.gpu_count) or shm_problems(count)
    for field, rule in rules.items():
        value = _valid_field(values, field, reported)
        if value is not _INVALID:
            problems += rule(value)
    parallel = [_valid_field(values, f, reported) for f in ("num_gpus", "batch_size", "lora_dropout")]
    if _INVALID not in parallel:
        problems += data_parallel_problems(*parallel)
    return problems


_INVALID = object()  # a field reported already, or a value its own validation refuses


def _valid_field(values: Mapping[str, Any], field: str, reported: set[str]) -> Any:
    """`values[field]` as TrainConfig's field validation makes it (its schema default when not
    given), or _INVALID when the field is `reported` or the value is not valid."""
    if field in reported:
        return _INVALID
    info = TrainConfig.model_fields[field]
    if field not in values:
        return info.get_default(call_default_factory=True)
    try:
        return _field_adapter(field).validate_python(values[field])
    except ValidationError:
        return _INVALID


@cache
def _field_adapter(field: str) -> TypeAdapter[Any]:
    """A validator of one TrainConfig field by itself (its type and constraints)."""
    info = TrainConfig.model_fields[field]
    return TypeAdapter(Annotated[info.annotation, info], config=ConfigDict(allow_inf_nan=False))
