"""Request bodies (unknown keys refused: 422) and response shapes of the JSON API (pydantic).

A training config travels as a plain object inside `config`: it is validated by
lorastudio.config (400 with every problem listed), not by the HTTP schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lorastudio.config import TrainConfig
from lorastudio.training.events import (
    ModelLoadCompleted,
    ModelLoadStarted,
    PlanChosen,
    PlanTrial,
    Preparing,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartBody(_Body):
    config: dict[str, Any] = Field(
        description="a TrainConfig (see lorastudio.config); unknown keys are errors"
    )
    queue: bool = Field(default=True, description="wait in the queue when busy (false: 409 when busy)")


class PreflightBody(_Body):
    config: dict[str, Any] = Field(description="a TrainConfig, validated as for start")


class StopBody(_Body):
    save: bool = Field(default=True, description="save a LoRA of the steps run (false: discard)")
    job_id: str | None = Field(default=None, description="a queued job to cancel, or the running job")


class ResumeBody(_Body):
    checkpoint: str | None = Field(
        default=None, pattern=r"^step-[0-9]+$", description="checkpoint folder name (default: the newest)"
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="settings to change that do not change the maths (save_every, keep_last, "
        "save_lora_every, keep_loras, max_bad_steps, lora_format, save_dtype, compile, gradient_checkpointing, offload_blocks, "
        "micro_batch_size, memory_budget_gb, num_gpus, sample settings, data_dir), or steps above the "
        "run's total to train it longer (RunSummary.train_longer)",
    )
    queue: bool = Field(default=True, description="wait in the queue when busy (false: 409 when busy)")


class CaptionBody(_Body):
    caption: str = Field(max_length=10_000, description="the new caption (empty removes the .txt file)")


class LoraRef(_Body):
    name: str = Field(min_length=1, max_length=100, description="output name of a trained LoRA")
    scale: float = Field(default=1.0, ge=-4.0, le=4.0, allow_inf_nan=False)
    step: int | None = Field(
        default=None,
        ge=0,
        description="one of its snapshots by step (loras/<name>-step-N); null: the final LoRA",
    )


class GenerateBody(_Body):
    family: str
    base_model: str = Field(
        min_length=1, description="hub id, absolute folder or .safetensors checkpoint, or name under models/"
    )
    revision: str | None = None
    base_config: str | None = Field(
        default=None,
        min_length=1,
        description="single-file base_model: pipeline folder or hub id of its configs (default: the original model's)",
    )
    v_prediction: bool | None = Field(
        default=None,
        description="SDXL single file: v-prediction (true) / epsilon (false); unset: as the file says",
    )
    prompt: str = Field(max_length=4000)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    # sizes and steps are checked against the generation budget (400 with the reason):
    # lorastudio.jobs.generation.budget_problems
    steps: int = Field(default=20, description="at most 200, and width x height x steps <= 209.7 M")
    width: int = Field(default=1024, description="pixels; at most 4096, and width x height <= 4.2 MP")
    height: int = Field(default=1024, description="pixels; at most 4096, and width x height <= 4.2 MP")
    guidance: float | None = Field(
        default=None, ge=0, le=100, allow_inf_nan=False, description="null: the family's default"
    )
    negative_prompt: str | None = Field(
        default=None,
        max_length=4000,
        description="what to steer away from; only for families whose pipeline takes one (FamilyOut.negative_prompt)",
    )
    loras: list[LoraRef] = Field(default_factory=list, max_length=8)
    references: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="reference images of an edit family (ids from POST /api/generate/references), slot order",
    )


# -- responses ---------------------------------------------------------------------------------
# Shapes of what the routes return (FastAPI validates and documents them; the web UI's types are
# generated from them). Numbers that can be non-finite in training are nullable.

JobStatusName = Literal[
    "queued", "preparing", "running", "stopping", "completed", "stopped", "cancelled", "failed", "interrupted"
]


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TrainConfigOut(TrainConfig):
    """A resolved TrainConfig as the API returns it (jobs, runs, preflight). Keys a stored config
    has that the current TrainConfig no longer knows are dropped instead of refused."""

    model_config = ConfigDict(
        extra="ignore", title="TrainConfigOut", json_schema_serialization_defaults_required=True
    )


# What a job's `phase` holds: the last load/preparing event (the engine's own event models).
PhaseOut = Annotated[ModelLoadStarted | ModelLoadCompleted | Preparing, Field(discriminator="type")]


class PlanTrialOut(PlanTrial):
    """One measured candidate plan, as the run record keeps it (unknown keys dropped)."""

    model_config = ConfigDict(
        extra="ignore", title="PlanTrialOut", json_schema_serialization_defaults_required=True
    )


class PlanOut(PlanChosen):
    """The plan a run uses (the engine's plan_chosen event, kept in the run record): base
    precision, checkpointing, blocks offloaded, micro-batch, compile, how it was decided, the
    measured trials and the speed features that fell back (with their reasons)."""

    model_config = ConfigDict(
        extra="ignore", title="PlanOut", json_schema_serialization_defaults_required=True
    )

    trials: list[PlanTrialOut] = Field(default_factory=list)


class StatusEvent(_Out):
    """The `status` event of GET /api/train/events, logged by the job service when a job's status
    changes (between the engine's events)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    type: Literal["status"] = "status"
    status: JobStatusName
    error: str | None = Field(description="why the job failed (null unless failed)")
    job_id: str


class ProblemOut(_Out):
    field: str
    message: str


class ErrorOut(_Out):
    error: str = Field(description="the domain error class, e.g. ConfigError")
    detail: str = Field(description="a complete, user-facing message")
    problems: list[ProblemOut] | list[str] | None = Field(
        default=None, description="ConfigError: {field, message} each; DatasetError: one string per file/fact"
    )


class DatasetSummary(_Out):
    name: str
    path: str
    images: int
    captions: int = Field(description="images with a .txt caption or a metadata.jsonl row")


class FamilyOut(_Out):
    name: str
    title: str
    objective: str
    latent_channels: int
    resolution_multiple: int
    lora_targets: list[str]
    defaults: dict[str, Any]
    supports: list[str]
    wide_compile: bool = Field(
        default=False, description="compile 'wide' applies (the family declares wider compile regions: SDXL)"
    )
    fuse_projections: bool = Field(
        default=False,
        description="fuse_projections 'on' applies (the family declares same-input projection groups)",
    )
    control_images: list[int] = Field(
        default_factory=lambda: [0, 0],
        description="[min, max] control (reference) images per training sample: [0, 0] text-to-image only",
    )
    guidance: Literal["cfg", "true_cfg", "embedded"] = Field(
        default="cfg",
        description="how its pipeline guides: classifier-free (cfg), true CFG (true_cfg_scale), or a "
        "distilled guidance embedding (embedded: no negative prompt)",
    )
    guidance_default: float | None = Field(default=None, description="the pipeline's default guidance scale")
    negative_prompt: bool = Field(default=False, description="generation takes a negative prompt")
    precisions: list[str] = Field(description="base_precision values this host can run")


class HostOut(_Out):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    device: str = Field(description='"cuda" or "cpu"')
    name: str
    memory_gb: float | None = Field(description="memory of one GPU (null on a CPU host)")
    precisions: list[str] = Field(description="the base_precision values a run can use here")
    gpu_count: int = Field(default=0, description="CUDA GPUs of this host (0: CPU only); num_gpus' limit")


class ModelOut(_Out):
    name: str = Field(description="folder name under models/ (usable as base_model)")
    path: str
    family: str | None = Field(description="the family that trains this pipeline, if any")


class InfoOut(_Out):
    version: str
    datasets_root: str
    outputs_root: str
    models_root: str
    datasets: list[DatasetSummary]
    families: list[FamilyOut]
    models: list[ModelOut]
    host: HostOut
    auth: bool


class DroppedFile(_Out):
    file: str
    reason: str


class MetricPoint(_Out):
    step: int
    epoch: int | None = None
    loss: float | None = None
    avg_loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    samples_per_second: float | None = None
    peak_memory_gb: float | None = None


class ValidationPoint(_Out):
    step: int = Field(description="the optimizer step the validation round followed")
    loss: float | None = Field(
        description="mean loss over the held-out images at fixed noise (null: not finite)"
    )


class ProgressOut(MetricPoint):
    type: Literal["progress"] = "progress"
    total_steps: int
    skipped_steps: int = Field(default=0, description="steps skipped so far (non-finite loss or gradients)")


class SampleRound(_Out):
    step: int = Field(description="the optimizer step the samples show")
    images: list[str] = Field(
        description="paths relative to the run folder (samples/step-000123-0.png), one per sample prompt"
    )


class SampleImage(_Out):
    step: int
    index: int = Field(description="index of the prompt in the config's sample_prompts")
    prompt: str | None = Field(description="the sample prompt (null when the config no longer has it)")
    name: str = Field(description="file name: step-000123-0.png")
    url: str = Field(description="where the PNG is served")
    references: list[str] = Field(
        default_factory=list,
        description="URLs of the reference images the prompt was rendered with (an edit family's), slot order",
    )


class SampleList(_Out):
    samples: list[SampleImage] = Field(description="oldest step first, then prompt order")


class StopRequested(_Out):
    save: bool


class BusyOut(_Out):
    work: str = Field(description='"sample round", "checkpoint", "saving the LoRA", ...')
    step: int | None = Field(description="the optimizer step it belongs to")
    since: str = Field(description="when it started (UTC, ISO 8601)")


class JobOut(_Out):
    id: str
    status: JobStatusName
    output_name: str | None
    family: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    phase: PhaseOut | None = Field(description="the last model_load_* / preparing event")
    progress: ProgressOut | None
    metrics: list[MetricPoint]
    validation: list[ValidationPoint] = Field(
        default_factory=list, description="the validation rounds so far (validation_split), by step"
    )
    lora_path: str | None
    steps_run: int
    error: str | None
    pid: int | None
    stop_requested: StopRequested | None
    busy: BusyOut | None = Field(
        default=None,
        description="work in flight that a stop waits for (up to a bound) before the worker is ended",
    )
    config: TrainConfigOut = Field(description="the resolved TrainConfig")
    samples: SampleRound | None = Field(default=None, description="the latest sample previews of the job")
    plan: PlanOut | None = Field(
        default=None, description="the plan the job runs with (null until it reports one)"
    )


class QueuedJob(_Out):
    id: str
    output_name: str | None


class StatusOut(_Out):
    job: JobOut | None = Field(description="the active job, else the latest of this server's life")
    queue: list[QueuedJob]
    busy: bool = Field(description="a start with queue=false would be refused (409)")
    event_seq: int = Field(description="id of the latest event (resume /api/train/events after it)")


class TrainLongerOut(_Out):
    from_step: int = Field(description="the newest checkpoint's step: the extension continues from it")
    steps: int = Field(description="the run's total steps now: the new total must be above it")


class RunSummary(_Out):
    id: str
    output_name: str
    family: str
    status: JobStatusName
    created_at: str
    started_at: str | None
    finished_at: str | None
    steps_run: int
    total_steps: int | None
    last_loss: float | None
    error: str | None
    source: Literal["service", "cli"] = Field(
        default="service", description="who started the run: the job service (API, UI) or `lorastudio train`"
    )
    resume_step: int | None = Field(
        default=None, description="the step a resume would continue from (null: not resumable)"
    )
    lora_file: bool = Field(
        default=False, description="the run's LoRA file (outputs/<name>/<name>.safetensors) exists"
    )
    train_longer: TrainLongerOut | None = Field(
        default=None,
        description="a resume with settings.steps above `steps` trains the run longer from `from_step` "
        "(null: the run is live, has no checkpoint or counts epochs)",
    )


class OutputOut(_Out):
    kind: str
    path: str


class RunDetail(RunSummary):
    config: TrainConfigOut = Field(description="the resolved TrainConfig the run was started with")
    plan: PlanOut | None = Field(default=None, description="the plan the run used (null: none reported)")
    metrics: list[MetricPoint]
    validation: list[ValidationPoint] = Field(
        default_factory=list, description="the run's validation rounds (validation_split), by step"
    )
    outputs: list[OutputOut]


class RunList(_Out):
    runs: list[RunSummary]


class CheckpointOut(_Out):
    name: str = Field(description="folder name (step-N), usable as ResumeBody.checkpoint")
    step: int
    path: str


class CheckpointList(_Out):
    checkpoints: list[CheckpointOut] = Field(description="oldest first")
    resume_step: int | None = Field(description="the step a resume would continue from (null: not resumable)")


class RunLog(_Out):
    lines: list[str] = Field(description="the log's last lines, oldest first")
    truncated: bool = Field(description="earlier lines exist that are not shown")
    size_bytes: int = Field(description="the log file's size (0: no log)")
    note: str | None = Field(default=None, description="why a run has no log here (a CLI run, an older run)")


class RunDeleted(_Out):
    deleted: str
    files_removed: bool


# Error responses every router declares (the bodies of api/errors.py).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "invalid request (every problem listed)"},
    401: {"description": "missing or wrong API token"},
    404: {"model": ErrorOut, "description": "not found"},
    409: {"model": ErrorOut, "description": "busy: a training job holds the GPU or the resource"},
}
