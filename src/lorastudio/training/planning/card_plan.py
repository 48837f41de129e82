"""The run's plan against the GPU it trains on, applied by the engine before any model loads
(jobs/card_fit.py decides; the job service's preflight and `train --check` show the same verdict
from the server's GPU facts). Here the facts are the run's own device's, so a CLI run on
`--device cuda:1` is judged on that card."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lorastudio.errors import ConfigError

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.hardware import HostInfo

log = logging.getLogger(__name__)


def device_host(device: torch.device) -> HostInfo:
    """The HostInfo of one CUDA device as jobs/hardware builds it from a probe's facts (its name,
    memory in GiB, the precisions its compute capability runs)."""
    from lorastudio.jobs.hardware import host_from_facts

    props = torch.cuda.get_device_properties(device)
    facts = {"name": props.name, "total_memory": props.total_memory, "capability": [props.major, props.minor]}
    return host_from_facts({"cuda": True, "devices": [facts]})


def card_planned(
    cfg: TrainConfig, model_dir: Path | None, controls: float, device: torch.device
) -> tuple[TrainConfig, str | None]:
    """`cfg` as the run uses it on `device` (jobs/card_fit.card_fit's verdict; `controls`: the
    dataset's control load, jobs/preflight.control_load): with the card's
    memory as memory_budget_gb where the default plan does not fit it and the lightest does
    ("planned"), else unchanged; and the verdict's note to log and report (None when it fits or
    there is nothing to judge: a CPU run, a single file, a hub id not in the hub cache). Raises ConfigError
    ("refused": even the lightest plan is forecast over the card)."""
    if device.type != "cuda":
        return cfg, None
    from lorastudio.config_host import compile_runs
    from lorastudio.jobs.card_fit import card_fit

    host = device_host(device)
    fit = card_fit(
        cfg, model_dir, host, controls, compiled=compile_runs(cfg.compile, device.type, host.capability)
    )
    if fit is None or fit.verdict == "fits":
        return cfg, None
    if fit.problem is not None:
        raise ConfigError([fit.problem])
    log.warning("GPU memory: %s", fit.note)
    if fit.budget_gib is not None:
        cfg = cfg.model_copy(update={"memory_budget_gb": fit.budget_gib})
    return cfg, fit.note
