"""Keep how long a finished run's phases took (lorastudio/timings.py), for the preflight's
wall-time forecast of later runs on this machine (jobs/time_forecast.py)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch

from lorastudio.config_host import compile_runs
from lorastudio.jobs.time_work import seen_text_tokens
from lorastudio.timings import (
    FINAL_LORA_SAVED,
    PhaseClock,
    adapter_signature,
    phase_seconds,
    run_signature,
    write_record,
)
from lorastudio.training.planning.cpu_rate import probe_cpu_rate

if TYPE_CHECKING:
    from lorastudio.families.spec import FamilySpec
    from lorastudio.settings import Settings
    from lorastudio.training.optimize import RunState
    from lorastudio.training.preflight import PreparedRun


def device_name(device: torch.device) -> str:
    """The name the preflight's HostInfo gives this device: the GPU's name, else "cpu"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


TOKEN_SAMPLE = 32  # the captions whose embeddings a record's text tokens are read from


def conditioning_tokens(spec: FamilySpec, conds: Mapping[str, Any], texts: list[str]) -> float | None:
    """The mean text tokens the denoiser sees per caption (jobs/time_work.seen_text_tokens) of a
    family that cuts its captions' embeddings to their tokens, read from the embeddings of up to
    TOKEN_SAMPLE of the run's unique `texts` in `conds` (phase 1's conditioning: cond_key -> its
    tensors, each [L, ...] without a batch axis; the longest first axis of its 2-D or wider
    tensors); None for a padding family (the record's default: max_sequence_length)."""
    if spec.text_padded:
        return None
    counts = []
    for text in sorted(set(texts))[:TOKEN_SAMPLE]:
        if text in conds:
            shapes = [t.shape[0] for t in conds[text].values() if isinstance(t, torch.Tensor) and t.ndim >= 2]
            counts.extend([max(shapes)] if shapes else [])
    return seen_text_tokens(spec, counts, None)


def compile_cache_counts() -> dict[str, int]:
    """Inductor's FX graph cache hits and misses in this process so far (Dynamo's counters; zero
    while Dynamo was never imported: nothing was compiled). RunState takes them at the run's start,
    so a worker that trains twice counts each run's own compiles."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {"hit": 0, "miss": 0}
    inductor = utils.counters["inductor"]
    return {"hit": int(inductor["fxgraph_cache_hit"]), "miss": int(inductor["fxgraph_cache_miss"])}


def compile_cache_state(at_start: dict[str, int], compiled: bool) -> Literal["warm", "cold"] | None:
    """How the run's compile went since `at_start` (compile_cache_counts()): "cold" when any graph
    was compiled afresh (a cache miss), "warm" when every graph came from the on-disk cache, None
    when nothing compiled or the cache was not consulted (a bypass)."""
    if not compiled:
        return None
    now = compile_cache_counts()
    if now["miss"] > at_start.get("miss", 0):
        return "cold"
    return "warm" if now["hit"] > at_start.get("hit", 0) else None


def record_run_timings(run: PreparedRun, state: RunState, clock: PhaseClock, settings: Settings) -> None:
    """Write the record of a fresh run that finished (its events stamped by `clock`; `state`: its
    plan, the training/planning/plan.Plan it ran, and the images it encoded, `latents_encoded`, fewer than
    the dataset's when the disk cache held some). A record that cannot be written is skipped.
    train() calls it just before its Complete event: the record's end is read after the CPU
    probe, its last work, so the run's time up to Complete is all in the record (RELIABILITY 1860)."""
    from lorastudio.training.speed.compile import device_capability

    cfg, plan = run.cfg, state.plan
    if plan is None:
        return
    # this host's rate at the run's threads (jobs/time_rate.device_rate), before the end is read
    cpu_rate = probe_cpu_rate() if run.device.type == "cpu" else None
    signature = run_signature(
        family=cfg.family,
        base_model=str(cfg.base_model),
        denoiser=run.family.spec.denoiser,
        device_name=device_name(run.device),
        plan=plan.as_dict(),
        compiled=compile_runs(cfg.compile, run.device.type, device_capability(run.device)),
        attention_backend=cfg.attention_backend,
        buckets=run.scan.bucket_histogram(),
        batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum,
        lora_rank=cfg.lora_rank,
        preservation=cfg.preservation is not None,
        adapter=adapter_signature(cfg.adapter, cfg.lokr_factor, cfg.lokr_decompose_both),
    )
    measured = phase_seconds(
        clock.stamped,
        cfg.save_every,
        end=clock.elapsed(),
        before=clock.before,
        lora_saved=clock.marks.get(FINAL_LORA_SAVED),
    )
    cpu = phase_seconds(  # the same phases in the process's CPU seconds (the host's load left out)
        clock.cpu_stamped,
        cfg.save_every,
        end=clock.cpu_elapsed(),
        before=clock.cpu_before,
        lora_saved=clock.cpu_marks.get(FINAL_LORA_SAVED),
        loads_by_stamps=True,
    )
    measured["cpu"] = {k: cpu[k] for k in ("phases", "total_s", "s_per_step")}
    measured["host_load"] = clock.load_at_start  # the load the wall-clock phases ran under
    encoded = measured["latents"] if state.latents_encoded is None else state.latents_encoded
    measured["latents_encoded"] = encoded  # the latent phase's work ("latents": the images in it)
    # the first step's compile came from the cache or not (jobs/time_forecast.py picks the kind)
    measured["compile_cache"] = compile_cache_state(state.compile_counts, signature["compiled"])
    work: dict[str, object] = {  # as jobs/time_forecast: a round's forward passes and its decodes
        "sample_work": len(cfg.sample_prompts) * (cfg.sample_steps or 1),
        "sample_images": len(cfg.sample_prompts),
        "text_tokens": state.text_tokens,  # a non-padding family's mean text tokens (loop_inputs.py)
    }
    if state.previews is not None and state.previews.fixed_s:  # a round's own part beside its renders
        work["sample_fixed_s"] = round(statistics.median(state.previews.fixed_s), 3)
    if cpu_rate is not None:
        work["cpu_rate"] = cpu_rate
    try:
        write_record(settings.home, run.run_dir.name, {"signature": signature, **measured, **work})
    except OSError:
        return
