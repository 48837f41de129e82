"""Typed training events: the protocol between the engine and the job service / CLI.

The engine calls `emit(event)` with one of the models below. Events are plain pydantic models
(picklable, JSON-serialisable with `event.model_dump(mode="json")`); this module must never
import torch, so the job service and the API can use it.

Numbers may be NaN/Inf when training misbehaves; the job service turns those into null at its
one ingestion point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelLoadStarted(_Event):
    type: Literal["model_load_started"] = "model_load_started"
    component: str  # "text_encoders" | "vae" | "denoiser" | ...


class ModelLoadCompleted(_Event):
    """`seconds`: the load's own time; `waited_s`: the part of it the run waited for, where the
    load ran beside other work (the denoiser's beside phases 1-2: training/speed/denoiser_early.py),
    else None (the run waited for all of it)."""

    type: Literal["model_load_completed"] = "model_load_completed"
    component: str
    seconds: float
    waited_s: float | None = None


class Preparing(_Event):
    """Work before the first step, `done` of `total`: "decoding" the run's own scan decoding
    every pixel of the images (targets, control images, loss masks) no check recorded yet,
    before any model loads (data/decode_progress.py: from a second into the scan, at most two
    a second, the total growing as it reaches each folder and kind, the last one final; none
    for a shorter scan); "conditioning" the captions encoded; "latents" the latents cached;
    "denoiser" 0 then 1 around its setup."""

    type: Literal["preparing"] = "preparing"
    phase: Literal["decoding", "conditioning", "latents", "denoiser"]
    done: int
    total: int


class Progress(_Event):
    """One optimizer step done. samples_per_second is steady-state (first step excluded; None
    until there is a second step); peak_memory_gb is the accelerator's (or the process RSS peak
    on CPU); skipped_steps counts the steps of the run so far whose loss or gradients were not
    finite (skipped: no optimizer update)."""

    type: Literal["progress"] = "progress"
    step: int
    total_steps: int
    epoch: int
    loss: float
    avg_loss: float
    lr: float
    grad_norm: float | None
    samples_per_second: float | None
    peak_memory_gb: float | None
    skipped_steps: int = 0


class SampleReady(_Event):
    """Sample previews of optimizer step `step` were written: `images` are paths relative to the
    run folder ("samples/step-000123-0.png"), one per sample prompt in the config's order, but a
    prompt whose image came out NaN or infinite has none (a RunWarning says so, RELIABILITY
    1651): a path's prompt index is the one in its name (run_files.parse_sample_name)."""

    type: Literal["sample_ready"] = "sample_ready"
    step: int
    images: list[str]


class Validated(_Event):
    """A validation round after optimizer step `step` (training/validate.py): `loss` is the mean
    loss over the `images` held-out images at the fixed noise levels; `best_step` / `best_loss`
    the lowest round of the run so far (this one included)."""

    type: Literal["validation"] = "validation"
    step: int
    loss: float
    images: int
    best_step: int
    best_loss: float


class RunWarning(_Event):
    """Part of the run failed without costing its result: the run goes on, or completes with this
    recorded (the run record's `warnings`). `step`: the optimizer step it happened at. Emitted
    today when the final sample round fails after the run's LoRA was written
    (training/loop_end.finish_run): the run completes, its LoRA whole, without those samples; and
    when a sample prompt's preview came out NaN or infinite (no file: loop_end.sample_round)."""

    type: Literal["warning"] = "warning"
    step: int
    message: str


class DatasetWarnings(_Event):
    """What may hurt the run about its dataset (data/scan_warnings.py: the job service's preflight
    lists the same as its `dataset.warnings`), emitted once after the run's preflight when there
    is any, and again, the whole list, when the text encoders find captions longer than they read
    (training/inputs/caption_length.py: after its conditioning phase): the run record keeps the latest
    list (`dataset_warnings`), its log states each once."""

    type: Literal["dataset_warnings"] = "dataset_warnings"
    warnings: list[str]


class PlanTrial(BaseModel):
    """One candidate plan measured by the plan chooser: its settings (as in PlanChosen), the
    measured seconds per sample and peak GPU memory, or why it could not run (out of memory)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_precision: str
    gradient_checkpointing: str
    offload_blocks: int
    micro_batch_size: int
    seconds_per_sample: float | None
    peak_memory_gb: float | None
    fits: bool
    note: str | None = None


class PlanChosen(_Event):
    """How the denoiser phase runs, emitted once before the first step: the base precision
    ("fp32" | "bf16" | "fp16" | "fp8" | "int8" | "nf4"), activation checkpointing ("off" |
    "selective" | "full"), repeated blocks offloaded to CPU RAM, samples per forward/backward,
    whether regional compile is active, the memory budget (None: none) and how the plan was
    decided ("settings" = fixed by the config, "measured" = chosen by measuring `trials`,
    "checkpoint" = the plan of the checkpoint a resume continues). `attention_backend` is the
    SDPA kernel used (training/speed/attention.py: "cudnn" | "flash" | "efficient" | "math" |
    "default" = torch's choice, cuDNN off). `compile_regions` says what is compiled: "" (nothing),
    "repeated blocks", "wide" or "wide + CUDA graphs" (training/speed/compile.py). `fused_projections`:
    the groups of same-input projections run as one matmul (training/speed/fused_projections.py; 0 =
    none). `fallbacks` lists the speed features that could not be used here, each with its
    reason (e.g. "fp8: needs ...")."""

    type: Literal["plan_chosen"] = "plan_chosen"
    base_precision: str
    gradient_checkpointing: str
    offload_blocks: int
    micro_batch_size: int
    compile: bool
    compile_regions: str = ""
    attention_backend: str = "default"
    fused_projections: int = 0
    memory_budget_gb: float | None = None
    decided_by: Literal["settings", "measured", "checkpoint"] = "settings"
    trials: list[PlanTrial] = Field(default_factory=list)
    fallbacks: list[str] = Field(default_factory=list)


class Complete(_Event):
    """The run ended without error. lora_path is None when stopped without saving."""

    type: Literal["complete"] = "complete"
    lora_path: str | None
    steps_run: int
    stopped: bool


class Error(_Event):
    type: Literal["error"] = "error"
    message: str


Event = Annotated[
    ModelLoadStarted
    | ModelLoadCompleted
    | Preparing
    | PlanChosen
    | Progress
    | SampleReady
    | Validated
    | RunWarning
    | DatasetWarnings
    | Complete
    | Error,
    Field(discriminator="type"),
]
EventAdapter: TypeAdapter[Event] = TypeAdapter(Event)
Emit = Callable[[Event], None]


def parse_event(data: dict) -> Event:
    """Rebuild a typed event from its JSON dict (raises pydantic.ValidationError if malformed)."""
    return EventAdapter.validate_python(data)


class StopRequest(BaseModel):
    """A request to end the run early: save=True writes a LoRA of the steps run, False discards."""

    model_config = ConfigDict(frozen=True)
    save: bool


# The engine polls this between phases, per image while caching and after every step.
StopCheck = Callable[[], StopRequest | None]
