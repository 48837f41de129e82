"""Keep how long a finished run's phases took (lorastudio/timings.py), for the preflight's
wall-time forecast of later runs on this machine (jobs/time_forecast.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lorastudio.config_rules import compile_runs
from lorastudio.timings import PhaseClock, phase_seconds, run_signature, write_record

if TYPE_CHECKING:
    from lorastudio.settings import Settings
    from lorastudio.training.optimize import RunState
    from lorastudio.training.preflight import PreparedRun


def device_name(device: torch.device) -> str:
    """The name the preflight's HostInfo gives this device: the GPU's name, else "cpu"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def record_run_timings(run: PreparedRun, state: RunState, clock: PhaseClock, settings: Settings) -> None:
    """Write the record of a fresh run that finished (its events stamped by `clock`; `state`: its
    plan, the training/plan.Plan it ran, and the images it encoded, `latents_encoded`, fewer than
    the dataset's when the disk cache held some). A record that cannot be written is skipped."""
    cfg, plan = run.cfg, state.plan
    if plan is None:
        return
    signature = run_signature(
        family=cfg.family,
        base_model=str(cfg.base_model),
        denoiser=run.family.spec.denoiser,
        device_name=device_name(run.device),
        plan=plan.as_dict(),
        compiled=compile_runs(cfg.compile, run.device.type),
        attention_backend=cfg.attention_backend,
        buckets=run.scan.bucket_histogram(),
        batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum,
        lora_rank=cfg.lora_rank,
        preservation=cfg.preservation is not None,
    )
    measured = phase_seconds(clock.stamped, cfg.save_every, end=clock.elapsed(), before=clock.before)
    encoded = measured["latents"] if state.latents_encoded is None else state.latents_encoded
    measured["latents_encoded"] = encoded  # the latent phase's work ("latents": the images in it)
    try:
        work = {"sample_work": len(cfg.sample_prompts) * (cfg.sample_steps or 1)}  # as jobs/time_forecast
        write_record(settings.home, run.run_dir.name, {"signature": signature, **measured, **work})
    except OSError:
        return
