"""Response shapes of training jobs and runs (pydantic): the job and its progress, metrics,
samples and plan, the run records, checkpoints and logs. Numbers that can be non-finite in
training are nullable."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from lorastudio.api.schemas import _Out
from lorastudio.config import TrainConfig
from lorastudio.training.events import (
    ModelLoadCompleted,
    ModelLoadStarted,
    PlanChosen,
    PlanTrial,
    Preparing,
)

JobStatusName = Literal[
    "queued", "preparing", "running", "stopping", "completed", "stopped", "cancelled", "failed", "interrupted"
]


class TrainConfigOut(TrainConfig):
    """A resolved TrainConfig as the API returns it (jobs, runs, preflight). Keys a stored config
    has that the current TrainConfig no longer knows are dropped instead of refused."""

    model_config = ConfigDict(
        extra="ignore", title="TrainConfigOut", json_schema_serialization_defaults_required=True
    )

    # kept in the answer while null, as every other setting (TrainConfig leaves it out of what it
    # writes: config_fields_training.LEFT_OUT_WHEN_NULL)
    init_lora: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description=TrainConfig.model_fields["init_lora"].description,
    )
    # kept in the answer at its default 0 (TrainConfig leaves it out of what it writes there:
    # config_fields_training.LEFT_OUT_AT_DEFAULT)
    validation_seed: int = Field(
        default=0, ge=0, le=2**32 - 1, description=TrainConfig.model_fields["validation_seed"].description
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


class SampleLora(_Out):
    name: str = Field(description="the run's output name")
    step: int | None = Field(description="its snapshot of this step (the raw weights); null: the final file")
    weights: Literal["raw", "ema"] | None = Field(
        default=None,
        description='"ema": the EMA weights of `step`, the file its checkpoint keeps (Generate\'s LoraRef.weights); '
        "null: as `step` says",
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
    # what renders it again (training/sample_source.py): POST /api/generate with these settings
    seed: int | None = Field(default=None, description="the preview's noise seed")
    width: int | None = Field(default=None, description="pixels")
    height: int | None = Field(default=None, description="pixels")
    guidance: float | None = Field(
        default=None,
        description="the prompt's, else the family's default for the run's base (null: not known); "
        "Qwen-Image's 1: its previews have no negative prompt, without which its true CFG is off",
    )
    steps: int | None = Field(
        default=None,
        description="inference steps: sample_steps, else the family's default for the run's base (null: not known)",
    )
    max_sequence_length: int | None = Field(
        default=None,
        description="the text tokens the preview read its prompt to (the run's max_sequence_length): send it "
        "to Generate; null: a family without the setting",
    )
    control_resolution: str | int | None = Field(
        default=None,
        description="an edit preview's: the run's control_resolution, which sized and encoded its references: "
        "send it to Generate (GenerateBody.control_resolution) with them to render its pixels; null: no references",
    )
    weights: Literal["ema", "raw"] = Field(
        default="raw",
        description="the adapter weights it shows: the EMA ones (ema_decay with sample_with_ema) or the raw",
    )
    lora: SampleLora | None = Field(
        default=None,
        description="the run's LoRA file holding those weights, as Generate's `loras` entry (step null: the "
        "final file); null when no file keeps them (`note` says why: an EMA preview of a step whose checkpoint, which keeps them, is not there)",
    )
    note: str | None = Field(
        default=None,
        description="null: Generate with `lora` at these settings renders this preview's pixels; else why not "
        "(no file keeps its EMA weights; its references were sized as the run trains them)",
    )


class SampleList(_Out):
    samples: list[SampleImage] = Field(description="the page's rounds, oldest step first, then prompt order")
    total: int = Field(description="the sample rounds (steps) of the run, every page's (with `step`: 0 or 1)")
    next_cursor: str | None = Field(
        description="give it as `cursor` for the page of older rounds; null after the oldest round"
    )


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
    elapsed_s: float | None = Field(
        default=None,
        description="seconds from started_at to finished_at (to now while live) on the server's monotonic "
        "clock (null before it started): a page adds its own monotonic time since it got it, never its wall "
        "clock less started_at (the server's: another machine's clock, or stepped since)",
    )
    phase: PhaseOut | None = Field(description="the last model_load_* / preparing event")
    progress: ProgressOut | None
    metrics: list[MetricPoint]
    validation: list[ValidationPoint] = Field(
        default_factory=list,
        description="the validation rounds so far (validation_split), by step (with `since`: those from that step on)",
    )
    lora_path: str | None
    steps_run: int
    error: str | None
    warnings: list[str] = Field(
        default_factory=list,
        description="what failed without failing the run (e.g. its final sample round after the LoRA "
        "was written: the run completed, its LoRA whole)",
    )
    dataset_warnings: list[str] = Field(
        default_factory=list,
        description="what may hurt the run about its dataset, as the preflight's dataset.warnings "
        "(images upscaled, cut to their bucket, ...): said by the run when it started",
    )
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
    event_seq: int = Field(
        description="id of the latest event (resume /api/train/events after it); `job` reflects every"
        " event up to it and none after it: a client that also applies the stream folds the events"
        " with a higher id onto this snapshot (or drops it), so its view never goes backwards"
    )


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
    elapsed_s: float | None = Field(
        default=None,
        description="the run's duration, started_at to finished_at on the monotonic clock of the process "
        "that ran it; while live, so far, for the server's own job (null: another process's live run, or not "
        "measured: a run killed outright, or recorded by an older version; then finished_at less started_at, "
        "two wall-clock stamps a clock step between them moves)",
    )
    steps_run: int
    total_steps: int | None
    last_loss: float | None
    error: str | None
    warnings: list[str] = Field(
        default_factory=list,
        description="what failed without failing the run (e.g. its final sample round after the LoRA "
        "was written: the run completed, its LoRA whole)",
    )
    shared_with: list[str] = Field(
        default_factory=list,
        description="the ids of the other run records of this output folder (a resume's record, the run it "
        "resumed), oldest first: deleting this record then keeps the files, which go with the last of them",
    )
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
    dataset_warnings: list[str] = Field(
        default_factory=list,
        description="what may hurt the run about its dataset, as the preflight's dataset.warnings "
        "(images upscaled, cut to their bucket, ...): said by the run when it started",
    )
    metrics: list[MetricPoint]
    validation: list[ValidationPoint] = Field(
        default_factory=list, description="the run's validation rounds (validation_split), by step"
    )
    outputs: list[OutputOut]


class RunList(_Out):
    runs: list[RunSummary] = Field(description="the page, newest first")
    total: int = Field(description="the runs in the store")
    next_cursor: str | None = Field(
        description="give it as `cursor` for the next page; null after the last page"
    )


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
