"""The preflight report: what a validated run would do, computed without loading any model.

The report's `plan` section says, for each setting of the memory plan (config_rules.PLAN_FIELDS), the
value the run will use and where it comes from: fixed by the settings, the default of a setting
left at auto, or chosen at the run's start by measuring a few steps against `memory_budget_gb`.
The VRAM estimate is a formula (`estimate_memory_gb`), not a measurement. The host RAM forecast (`memory.host_gb`, jobs/host_memory.py) is fitted on measured CPU runs and
says whether the run fits the memory available now.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.config_datasets import top_resolution
from lorastudio.config_host import compile_runs
from lorastudio.config_preservation import preservation_line
from lorastudio.config_rules import PLAN_FIELDS, fusion_choice, plan_fields_left_auto
from lorastudio.data import DatasetScan, is_image_name
from lorastudio.data.caption_variants import caption_report, scan_variants
from lorastudio.data.entries import entry_report, epoch_bucket_counts, run_steps
from lorastudio.data.holdout import validation_section
from lorastudio.data.masks import mask_section
from lorastudio.data.preservation_texts import encode_list, preservation_texts
from lorastudio.data.resolutions import buckets_by_resolution
from lorastudio.data.scan_warnings import scan_warnings
from lorastudio.errors import HostMemoryShort
from lorastudio.host_share import HostShare
from lorastudio.jobs import host_memory
from lorastudio.jobs.budget_plan import budget_plan, plan_words
from lorastudio.jobs.caption_tokens import caption_tokens_counted, tokenizer_folder
from lorastudio.jobs.card_fit import CardFit, _per_gpu, card_fit, sizing_folder
from lorastudio.jobs.hardware import HostInfo, host_info, resolved_dtype
from lorastudio.jobs.preflight_cache import latent_cache_section
from lorastudio.jobs.preflight_family import conditioning_section, family_section
from lorastudio.jobs.preflight_pairs import controls_section, training_mode
from lorastudio.jobs.run_host import host_for_run
from lorastudio.jobs.time_forecast import time_forecast
from lorastudio.jobs.validation import ValidatedRun
from lorastudio.jobs.vram_estimate import (  # noqa: F401 (re-exported: host_memory, tests)
    ACTIVATION_FACTOR,
    DEVICE_ACTIVATION_FACTOR,
    IN_FLIGHT_BLOCKS,
    WEIGHT_BYTES,
    denoiser_param_split,
    estimate_memory_gb,
    param_count,
)
from lorastudio.settings import get_settings

# Lightest first: the quantised precisions a memory budget may fall back to from the plain default
# (training/planning/plan.QUANTISED_LADDER; never fp8, never fp16: auto without bf16 is fp32, training/planning/plan.py).
_LIGHTEST_PRECISIONS = ("nf4", "int8")


@dataclass(frozen=True)
class PlanValues:
    """The four settings of a memory plan as the run would use them."""

    base_precision: str  # fp32 | bf16 | fp16 | fp8 | int8 | nf4
    gradient_checkpointing: str  # off | selective | full
    offload_blocks: int
    micro_batch_size: int


def preflight_report(
    run: ValidatedRun, host: HostInfo | None = None, home: Path | None = None
) -> dict[str, Any]:
    """A JSON-able report: dataset (images found/used/dropped with reasons, captions, buckets),
    schedule (steps, epochs), precision, the memory plan (`plan`: each plan setting's value and
    source), a rough memory estimate, the base model's flavour (`family`: family_section) and the
    wall-time forecast (`time`: jobs/time_forecast.py, from the run records under `home`, default
    the settings' studio home) and the checks left to the run's start (`notes`: ValidatedRun.notes).
    `host` defaults to this machine (tests pass another)."""
    cfg = run.config
    scan = run.scan
    host = host or host_for_run(host_info(), None, cfg.num_gpus)  # the GPU(s) the service runs it on
    # a CPU host's share of a core for a busy thread: a burst at the check's start, the rest at
    # its end where the wall-time forecast reads it (jobs/time_contention.py)
    share = HostShare() if host.name == "cpu" else None
    if share:
        share.burst()
    images = scan.images()  # each image once (a run of several resolutions has a copy at each)
    sources = Counter(item.caption_source for item in images)
    per_epoch = epoch_bucket_counts(scan)  # the entries' repeats / weights (data/mix.py), per batch key
    steps, steps_per_epoch = run_steps(cfg, scan)
    dtype = resolved_dtype(cfg.base_precision, host)
    compiled = compile_runs(cfg.compile, host.device, host.capability)
    controls = control_load(scan, cfg)
    fit = card_fit(cfg, run.model_dir, host, controls, compiled=compiled)  # the card's verdict
    planned = fit.budget_gib if fit is not None else None  # the card's memory, taken as the budget
    budgeted = cfg.model_copy(update={"memory_budget_gb": planned}) if planned else cfg  # as the run has it
    # the time and host RAM forecasts: of the plan the budget is forecast to choose, else the default
    sized = sizing_folder(cfg, run.model_dir)  # a local folder, or a hub id's snapshot in the hub cache
    chosen = budget_plan(budgeted, sized, host, budgeted.memory_budget_gb, controls)
    forecast_plan = chosen or plan_for_estimate(cfg, host)
    plan = preflight_plan(budgeted, host)
    plan["budget_from_gpu"] = planned is not None
    if cfg.compile == "wide" and plan["compile"]:
        plan["compile_shapes"] = len(batch_shapes(per_epoch, cfg.batch_size, cfg.micro_batch_size))
    captions = caption_report(
        scan,
        cfg.caption_variants,
        cfg.seed,
        with_controls=families.get(cfg.family).spec.prompt_sees_controls,
        in_step=cfg.train_text_encoder,
    )
    cache = latent_cache_section(cfg, scan, host, dtype, get_settings())
    spec = families.get(cfg.family).spec
    sees = spec.prompt_sees_controls
    held = run.holdout.validation if run.holdout else ()  # their captions are encoded in phase 1 too
    preserved = encode_list(  # and the class-word captions (or prompts) of preservation
        preservation_texts(cfg, scan), scan, scan_variants(scan, cfg.caption_variants, cfg.seed)
    )
    token_section, seen_tokens = caption_tokens_counted(spec, cfg, scan, tokenizer_folder(cfg, run.model_dir))
    work = {  # what phase 1 encodes: less what the on-disk cache holds already
        "steps": steps,
        "texts": (
            cache["texts"] - cache["texts_cached"]
            if cache.get("texts") is not None
            else captions["texts_encoded"]
        )
        + cache.get("texts_probed", 0)
        + len(cfg.sample_prompts)
        + len({(it.caption, it.controls) if sees else it.caption for it in held})
        + len(preserved),
        "images": len(scan.items) - (cache.get("images_cached") or 0),
        "buckets": scan.bucket_histogram(),
        "text_tokens": seen_tokens,  # a caption's, where the family cuts its embeddings to them
    }
    timing = time_forecast(
        cfg,
        run.model_dir,
        host,
        dataclasses.asdict(forecast_plan),
        plan["compile"],
        work,
        home or get_settings().home,
        share,
    )
    return {
        "config": cfg.model_dump(mode="json"),
        "dataset": {
            "path": str(scan.root),
            "images_found": len(images)
            + sum(1 for name, _ in scan.dropped if is_image_name(name))
            + (len(run.holdout.names()) if run.holdout and isinstance(cfg.validation_split, float) else 0),
            "images_used": len(images),
            "dropped": [{"file": name, "reason": why} for name, why in scan.dropped],
            "missing_captions": sorted(
                i.path.name for i in images if i.caption_source in ("default", "trigger")
            ),
            "caption_sources": dict(sorted(sources.items())),
            "unique_captions": len(scan.captions()),
            "buckets": scan.bucket_histogram(),
            "buckets_by_resolution": buckets_by_resolution(scan.items),
            "fingerprint": scan.fingerprint,
            "warnings": scan_warnings(scan, cfg, run.holdout),  # a run's log states them too
            "masks": mask_section(scan.items, cfg.alpha_mask, scan.labels()),
            "controls": controls_section(scan, cfg.control_resolution, cfg.family),
            "mode": training_mode(cfg.family, scan),
            "validation": validation_section(run.holdout, cfg.validate_every) if run.holdout else None,
            "entries": entry_report(scan),
            "captions": captions,
            "caption_tokens": token_section,
            "samples_per_epoch": sum(per_epoch.values()),
        },
        "schedule": {
            "steps": steps,
            "epochs": round(steps / steps_per_epoch, 2),
            "steps_per_epoch": steps_per_epoch,
            "batch_size": cfg.batch_size,
            "grad_accum": cfg.grad_accum,
            "preservation": preservation_line(cfg, len(scan.items)),
        },
        "precision": {
            "requested": cfg.base_precision,
            "base_dtype": dtype,
            "lora_dtype": "fp32",
            "device": host.device,
            "tf32": cfg.enable_tf32 and host.device == "cuda",
            "gradient_checkpointing": cfg.gradient_checkpointing,
        },
        "plan": plan,
        "conditioning": conditioning_section(cfg),
        # a hub id in the hub cache is sized from its snapshot, as the verdict is (RELIABILITY 1186)
        "memory": {**_memory_section(budgeted, sized, host, scan, chosen), **gpu_section(fit)},
        "latent_cache": cache,
        "host": host.public(),
        "family": family_section(cfg, run.model_dir),
        "time": timing,
        "notes": list(run.notes),
    }


def default_plan_values(cfg: TrainConfig, host: HostInfo) -> dict[str, Any]:
    """What each plan setting left at auto means without a memory budget: precision bf16 on a
    bf16-capable GPU else fp32, checkpointing off, no block swap, micro-batch = batch_size."""
    return {
        "base_precision": resolved_dtype("auto", host),
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": cfg.batch_size,
    }


def batch_shapes(
    buckets: dict[str, int], batch_size: int, micro_batch_size: int | None
) -> set[tuple[str, int]]:
    """The distinct (bucket, samples) shapes of the forward passes of an epoch: full batches and
    each bucket's smaller tail batch (the sampler keeps it), split into micro-batches when
    `micro_batch_size` is set. Compile "wide" compiles each shape once (static shapes)."""
    sizes: set[tuple[str, int]] = set()
    for bucket, count in buckets.items():
        for batch in {min(batch_size, count), count % batch_size} - {0}:
            micro = min(micro_batch_size or batch, batch)
            sizes |= {(bucket, n) for n in {micro, batch % micro} - {0}}
    return sizes


def preflight_plan(cfg: TrainConfig, host: HostInfo) -> dict[str, Any]:
    """The report's `plan` section.

    Returns {"memory_budget_gb", "decided_by": "settings" | "measured", "compile": whether
    regional compile will be on, "compile_shapes": None (preflight_report sets it for compile
    "wide": the batch shapes to compile), "fuse_projections": whether the run fuses its
    same-input projections (None: decided with the plan measured at the start), "fields": one
    {"name", "requested", "value", "source"} per PLAN_FIELDS entry}. source: "settings" (fixed
    by the config), "default" (left at auto, no budget: the plain default, which is `value`) or
    "budget" (left at auto with a budget: chosen at the start of the run by measuring a few
    real steps; `value` is None)."""
    budget = cfg.memory_budget_gb
    left = set(plan_fields_left_auto(cfg))
    defaults = default_plan_values(cfg, host)
    fields = []
    for name in PLAN_FIELDS:
        requested = getattr(cfg, name)
        if name not in left:
            value, source = requested, "settings"
        elif budget is None:
            value, source = defaults[name], "default"
        else:
            value, source = None, "budget"
        fields.append({"name": name, "requested": requested, "value": value, "source": source})
    return {
        "memory_budget_gb": budget,
        "decided_by": "measured" if budget is not None and left else "settings",
        "compile": compile_runs(cfg.compile, host.device, host.capability),
        "compile_shapes": None,
        "fuse_projections": _fuses(cfg, host, {f["name"]: f["value"] for f in fields}),
        "fields": fields,
    }


def _fuses(cfg: TrainConfig, host: HostInfo, values: dict[str, Any]) -> bool | None:
    """Whether the run fuses its projections with these plan values; None when that depends on
    a value measured at the start of the run (a None in `values`) and could be yes."""
    light = {"base_precision": "bf16", "gradient_checkpointing": "off", "offload_blocks": 0}
    known = {n: light[n] if values[n] is None else values[n] for n in light}  # the fusing case
    choice = fusion_choice(
        cfg.fuse_projections,
        bool(families.get(cfg.family).spec.fused_projection_groups),
        precision=str(known["base_precision"]),
        device_type=host.device,
        lora_dropout=cfg.lora_dropout,
        plain_plan=known["gradient_checkpointing"] == "off" and not known["offload_blocks"],
        adapter=cfg.adapter,  # the engine's rule (plan_build): a DoRA / LoHa / LoKr run is unfused
    )
    if choice.fuse and any(values[n] is None for n in light):
        return None
    return choice.fuse


def plan_for_estimate(cfg: TrainConfig, host: HostInfo, *, lightest: bool = False) -> PlanValues:
    """The plan the memory estimate assumes: the fixed settings, and each setting left at auto at
    its plain default (the fastest plan) or, with `lightest`, at the lightest value a budget may
    choose (nf4 or int8 where the host runs them, else the plain default as the engine's ladder
    has it: fp32 on a GPU without bf16; full checkpointing, every block swapped on a GPU unless
    compile is "wide", micro-batch 1)."""
    values = default_plan_values(cfg, host)
    left = set(plan_fields_left_auto(cfg))
    if lightest:
        values["base_precision"] = next(
            (p for p in _LIGHTEST_PRECISIONS if p in host.precisions), values["base_precision"]
        )
        values["gradient_checkpointing"] = "full"
        # every block swapped where the engine may swap (training/planning/plan.block_swap_searchable: CUDA,
        # and not compile "wide", whose compiled regions hold the blocks)
        values["offload_blocks"] = 1000 if host.device == "cuda" and cfg.compile != "wide" else 0
        values["micro_batch_size"] = 1
    for name in PLAN_FIELDS:
        if name not in left:
            values[name] = getattr(cfg, name)
    return PlanValues(**values)


def _memory_section(
    cfg: TrainConfig, model_dir: Path | None, host: HostInfo, scan: DatasetScan, chosen: PlanValues | None
) -> dict[str, Any]:
    """estimate_memory_gb for the fastest plan (with the dataset's most control images per
    sample); with a budget choosing some settings, also `lightest_gb`: the estimate of the
    lightest plan the budget may choose; and the host RAM forecast (jobs/host_memory.py):
    `host_gb`, `host_phases`, `host_certain`, `available_gb` (what this host has free now) and
    `host_warning` (a forecast that exceeds it). The host RAM forecast is of `chosen` (the plan
    the budget is forecast to choose: jobs/budget_plan.py) when given, else of the fastest plan.
    The GPU estimates are one GPU's: a data-parallel rank holds its slice of a micro-batch (1185)."""
    plan = plan_for_estimate(cfg, host)
    compiled = compile_runs(cfg.compile, host.device, host.capability)
    controls = control_load(scan, cfg)
    section = estimate_memory_gb(cfg, model_dir, _per_gpu(plan, cfg.num_gpus), controls, compiled=compiled)
    lightest = None
    if cfg.memory_budget_gb is not None and plan_fields_left_auto(cfg) and section["estimated_gb"]:
        light = _per_gpu(plan_for_estimate(cfg, host, lightest=True), cfg.num_gpus)
        lightest = estimate_memory_gb(cfg, model_dir, light, controls, compiled=compiled)
        section["note"] += (
            "; settings left to the memory budget are assumed at their fastest (default) values:"
            " the run measures and picks lighter ones when they do not fit"
        )
    section["lightest_gb"] = lightest["estimated_gb"] if lightest else None
    if cfg.num_gpus > 1:
        section["note"] += f"; per GPU: each of the {cfg.num_gpus} ranks holds its slice of a micro-batch"
    if chosen is not None:
        section["note"] += (
            f"; the time and host RAM forecasts assume the plan it is forecast to pick ({plan_words(chosen)})"
        )
    forecast = host_memory.scan_forecast(cfg, model_dir, chosen or plan, host, scan)
    available = host_memory.available_host_bytes()
    section["host_gb"] = forecast["host_gb"]
    section["host_phases"] = forecast["phases"]
    section["host_certain"] = forecast["certain"]
    section["available_gb"] = None if available is None else round(available / 1e9, 2)
    try:
        section["host_warning"] = host_memory.check_host_memory(forecast, cfg, available)
    except HostMemoryShort as err:
        section["host_warning"] = str(err)
    return section


def gpu_section(fit: CardFit | None) -> dict[str, Any]:
    """The memory section's GPU part (jobs/card_fit.py): `gpu_gb` the card's memory (GiB; None
    off CUDA), `gpu_fit` the verdict ("fits" | "planned" | "tight" | "refused"; None: nothing to
    judge), `gpu_note` its sentence (None when it fits)."""
    if fit is None:
        return {"gpu_gb": None, "gpu_fit": None, "gpu_note": None}
    return {
        "gpu_gb": fit.card_gib,
        "gpu_fit": fit.verdict,
        "gpu_note": None if fit.verdict == "fits" else fit.note,
    }


def control_load(scan: DatasetScan, cfg: TrainConfig) -> float:
    """The most control pixels of a sample in units of a target at the training side (the
    memory estimate's): the control count where controls take their targets' buckets, their
    own sizes' pixels over side x side where control_resolution sizes them (data/control_sizing.py)."""
    if not scan.controls_sized():
        return float(scan.controls_per_image())
    side = top_resolution(cfg.resolution) or 1024
    return max(sum(w * h for w, h in it.control_sizes) for it in scan.items) / side**2
