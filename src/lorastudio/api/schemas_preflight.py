"""Response shapes of POST /api/train/preflight: the dataset, schedule, precision, memory plan
and rough memory estimate of a run that passed validation (jobs/preflight.py builds it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from lorastudio.api.schemas import DroppedFile, HostOut, _Out
from lorastudio.api.schemas_runs import TrainConfigOut
from lorastudio.timings import PhaseName


class PreflightEntry(_Out):
    label: str = Field(description="the entry as configured (a kohya sub-folder: parent/N_words)")
    path: str
    images: int
    repeats: int | None
    weight: float | None
    samples_per_epoch: int = Field(description="samples the entry gives per epoch (repeats / weight)")
    share: float = Field(description="its share of the epoch's samples, 0..1")
    loss_weight: float = Field(
        description="multiplies its samples' loss (a regularisation entry's: x prior_loss_weight)"
    )
    regularisation: bool = Field(default=False, description="class images (prior preservation)")
    caption_dropout: float
    resolution: list[int] = Field(description="the entry's training side(s)")
    trigger_word: str | None


class PreflightCaptions(_Out):
    examples: list[str] = Field(
        description="three captions as the model sees them (trigger, shuffle, dropout)"
    )
    variants_per_image: int = Field(
        description="caption variants encoded per image (1: captions as they are)"
    )
    texts_encoded: int = Field(description="distinct texts encoded in phase 1 (their embeddings are cached)")
    cost: str | None = Field(default=None, description="what tag shuffle / dropout costs; null when off")


class CutCaption(_Out):
    file: str = Field(description='the image ("<entry label>/<file>" with several dataset entries)')
    tokens: int = Field(description="its caption's tokens (the longest variant), template tokens included")


class PreflightCaptionTokens(_Out):
    limit: int = Field(description="the tokens the text encoder reads of a caption in this run")
    counted: bool = Field(
        description="false: the tokenizer is not on this machine or has no tokenizer.json; "
        "the run counts at its start"
    )
    cut: list[CutCaption] = Field(
        description="captions longer than `limit` (they train cut there), longest first"
    )
    note: str | None = Field(default=None, description="what the count found, or why it is made at the start")


class TrainingMode(_Out):
    kind: Literal["text-to-image", "edit", "mixed"] | None = Field(
        default=None, description="null: a text-to-image-only family"
    )
    note: str | None = None


class PreflightValidation(_Out):
    held_out: int = Field(description="images held out of training for the validation loss")
    images: list[str] = Field(
        description='their file names ("<entry label>/<file>" when they come from several dataset entries)'
    )
    source: str = Field(description="where they come from (a seeded fraction of the dataset, or a folder)")
    train_images: int = Field(description="images left to train on")
    every: int | None = Field(description="validate_every (null: only after the last step)")


class PreflightMasks(_Out):
    source: str = Field(description='where the masks come from: "masks/ folder" or "alpha channel"')
    images_with_mask: int
    without_mask: list[str] = Field(
        description='images that train unmasked (no mask file / no alpha; "<entry label>/<file>" with several entries)'
    )


class PreflightDataset(_Out):
    path: str
    images_found: int
    images_used: int
    dropped: list[DroppedFile]
    missing_captions: list[str] = Field(description="images captioned only by the default caption / trigger")
    caption_sources: dict[str, int]
    unique_captions: int
    buckets: dict[str, int] = Field(description='"WxH" -> images')
    buckets_by_resolution: dict[str, dict[str, int]] = Field(
        default_factory=dict, description='resolution -> {"WxH" -> images} (each image at each resolution)'
    )
    fingerprint: str
    warnings: list[str] = Field(
        default_factory=list, description="what may hurt the run, e.g. images upscaled by more than 2x"
    )
    controls: dict[str, Any] | None = Field(
        default=None,
        description="paired datasets: pairs, per_image (controls per target), sources, buckets, rule "
        "(control_resolution in words), sizes (source -> trained size lines), resize, "
        "examples (target -> controls); null for a text-to-image dataset",
    )
    entries: list[PreflightEntry] = Field(
        default_factory=list, description="each dataset entry (data_dir: one) with its count and share"
    )
    samples_per_epoch: int = Field(default=0, description="samples of one epoch, over every entry")
    captions: PreflightCaptions | None = None
    caption_tokens: PreflightCaptionTokens | None = Field(
        default=None,
        description="captions longer than the text encoder reads, counted with the base's tokenizer.json "
        "(jobs/caption_tokens.py); null for a family whose pipeline never cuts",
    )
    mode: TrainingMode = Field(
        default_factory=lambda: TrainingMode(),
        description="for a family that takes control images: text-to-image, edit or both (mixed)",
    )
    masks: PreflightMasks | None = Field(
        default=None, description="the loss masks (masks/ folder or alpha_mask); null when no image is masked"
    )
    validation: PreflightValidation | None = Field(
        default=None, description="the validation hold-out (validation_split); null without one"
    )


class PreflightSchedule(_Out):
    steps: int
    epochs: float
    steps_per_epoch: int
    batch_size: int
    grad_accum: int
    preservation: str | None = Field(
        default=None, description="differential output preservation: what, its weight, the cost per step"
    )


class PrecisionPlan(_Out):
    requested: str
    base_dtype: str
    lora_dtype: str
    device: str
    tf32: bool
    gradient_checkpointing: str


class PlanFieldOut(_Out):
    name: Literal["base_precision", "gradient_checkpointing", "offload_blocks", "micro_batch_size"]
    requested: str | int | None = Field(description="the setting as given (auto / null = left to the plan)")
    value: str | int | None = Field(description="what the run uses (null: measured at the start of the run)")
    source: Literal["settings", "default", "budget"] = Field(
        description="settings: fixed by the config; default: left at auto without a memory budget (the plain "
        "default); budget: chosen at the start of the run by measuring a few real steps"
    )


class PreflightPlan(_Out):
    memory_budget_gb: float | None
    decided_by: Literal["settings", "measured"] = Field(
        description="measured: a memory budget chooses the settings left at auto at the start of the run"
    )
    compile: bool = Field(description="regional compile will be on (auto = on with CUDA)")
    compile_shapes: int | None = Field(
        default=None,
        description="compile 'wide': the distinct batch shapes (aspect bucket x samples) the run compiles, each"
        " once (about 2 minutes each on an H200 the first time, seconds from the compile cache); else null",
    )
    fuse_projections: bool | None = Field(
        default=False,
        description="the run fuses its same-input projections (fuse_projections); null: decided with the plan"
        " measured at the start of the run",
    )
    fields: list[PlanFieldOut] = Field(description="one per plan setting, in config_rules.PLAN_FIELDS order")
    budget_from_gpu: bool = Field(
        default=False,
        description="no memory_budget_gb was set and the default plan is forecast over the GPU: the run takes"
        " the GPU's memory less 1 GiB as its budget (memory_budget_gb here) and measures the settings left at auto",
    )


class MemoryEstimate(_Out):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    estimated_gb: float | None = Field(description="rough peak (a formula, not a measurement)")
    phases: dict[str, float] | None
    note: str
    lightest_gb: float | None = Field(
        default=None,
        description="with a memory budget: the rough peak of the lightest plan it may choose (null otherwise)",
    )
    host_gb: float | None = Field(
        default=None,
        description="forecast peak host RAM of the run in GB (jobs/host_memory.py; null for a hub id)",
    )
    host_phases: dict[str, float] | None = Field(
        default=None, description="host RAM of each phase above the process's base, GB"
    )
    host_certain: bool = Field(
        default=False,
        description="the host forecast is measured (CPU, the rough activation formula <= 15 % of the peak): "
        "a run above the available memory is refused; false (CUDA, or activations leading): it only warns",
    )
    available_gb: float | None = Field(default=None, description="host memory available now, GB")
    host_warning: str | None = Field(
        default=None, description="the forecast exceeds the available memory: what to lower (null: it fits)"
    )
    gpu_gb: float | None = Field(
        default=None, description="memory of the GPU the run trains on, GiB (null: no GPU)"
    )
    gpu_fit: Literal["fits", "planned", "tight", "refused"] | None = Field(
        default=None,
        description="the plan's forecast against that GPU: fits; planned (the default plan does not fit: the GPU's"
        " memory becomes the budget); tight (within the forecast's error of the GPU: it may run out of memory);"
        " refused (even the lightest plan does not fit); null: nothing to judge (no GPU, no local weights)",
    )
    gpu_note: str | None = Field(default=None, description="what gpu_fit means for this run (null: it fits)")


class PreflightFamily(_Out):
    name: str
    variant: str | None = Field(
        default=None,
        description="the base model's flavour (e.g. FLUX.2 klein 9B step-distilled), read from its configs; "
        "null for a family with one flavour or a hub id",
    )
    notes: list[str] = Field(default_factory=list, description="what training this flavour means")
    single_file: str | None = Field(
        default=None,
        description="a single-file base: the checkpoint, its layout, the base config its configs come from, "
        "and the prediction type; null for a pipeline folder or hub id",
    )


class PreflightConditioning(_Out):
    per_step: bool = Field(
        description="captions are encoded in every step (SDXL's train_text_encoder: no caption cache); "
        "false: each unique caption is encoded once before training"
    )
    note: str


class LatentCacheOut(_Out):
    setting: str = Field(description="latent_cache as set: auto | memory | disk | off")
    mode: str = Field(description="what the run does: memory | disk | per_step (encoded every step)")
    ram_gb: float = Field(description="RAM the in-memory cache would take (mean + std fp32 per variant), GB")
    folder: str | None = Field(default=None, description="on disk: the shards' folder (this base's VAE)")
    disk_bytes: int | None = Field(default=None, description="on disk: that folder's size now, bytes")
    images: int | None = Field(default=None, description="on disk: images the run caches")
    images_cached: int | None = Field(
        default=None,
        description="on disk: images whose every variant is already cached (reused, not encoded)",
    )
    texts: int | None = Field(
        default=None, description="on disk: captions (with their variants) phase 1 encodes; null: kept in RAM"
    )
    texts_cached: int | None = Field(
        default=None, description="on disk: those captions whose embeddings are already cached (not encoded)"
    )
    texts_probed: int = Field(
        default=0,
        description="on disk: probe captions encoded besides, to learn what the text encoders give (first run only)",
    )
    note: str | None = None


class TimePhase(_Out):
    name: PhaseName
    seconds: float
    basis: str = Field(description="where the number comes from (earlier runs here, the H200 table, a guess)")


class TimeForecast(_Out):
    total_s: float = Field(
        description="forecast wall time of the run, from the CLI's or job worker's start to the run's end"
    )
    phases: list[TimePhase]
    source: Literal["history", "machine", "model"] = Field(
        description="history: earlier runs of this base and plan on this machine; machine: runs of other "
        "bases here, scaled; model: no run here (the H200 table of bench/RESULTS, or a guess)"
    )
    confidence: Literal["measured", "scaled", "guess"] = Field(
        description="measured: within ~15 %; scaled: +-30 %; guess: a factor of 2 either way"
    )
    runs: int = Field(description="earlier runs the forecast is taken from")
    note: str
    cpu_s: float | None = Field(
        default=None,
        description="a one-thread CPU run forecast on the CPU clock: its CPU seconds, before the host's"
        " contention (jobs/time_contention.py); null: a wall-clock forecast",
    )
    host_share: float | None = Field(
        default=None, description="the share of one core a busy thread got during the check (0-1)"
    )
    wall_per_cpu: float | None = Field(
        default=None,
        description="the wall seconds a CPU second is forecast to take: 1 / host_share, with the newest"
        " recent run's own wall / CPU seconds (their geometric mean)",
    )


class PreflightOut(_Out):
    config: TrainConfigOut = Field(description="the resolved TrainConfig")
    dataset: PreflightDataset
    schedule: PreflightSchedule
    precision: PrecisionPlan
    plan: PreflightPlan
    conditioning: PreflightConditioning | None = Field(
        default=None,
        description="how captions become conditioning (jobs/preflight_family.conditioning_section)",
    )
    memory: MemoryEstimate
    latent_cache: LatentCacheOut | None = None
    host: HostOut
    family: PreflightFamily | None = None
    time: TimeForecast | None = Field(
        default=None, description="the wall-time forecast, per phase with its basis (jobs/time_forecast.py)"
    )
    notes: list[str] = Field(
        default_factory=list,
        description="checks the preflight did not make now, each with why (e.g. lora_targets while other "
        "checks run; the run's start makes them), and what it cannot tell (an init_lora DoRA file whose "
        "header names no dora_scale rule, read by ComfyUI's). Empty: every check was made",
    )
