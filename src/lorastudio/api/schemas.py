"""Request bodies (unknown keys refused: 422), the error and info shapes of the JSON API (pydantic).

The shapes of jobs and runs are in api/schemas_runs.py; datasets, LoRAs and generation in
api/schemas_files.py; base models in api/schemas_models.py; preflight in api/schemas_preflight.py.

A training config travels as a plain object inside `config`: it is validated by
lorastudio.config (400 with every problem listed), not by the HTTP schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lorastudio.generation_rules import GUIDANCE_MAX, LORA_SCALE_LIMIT, SEED_MAX


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
        "micro_batch_size, memory_budget_gb, num_gpus, sample settings, data_dir; latent_cache and "
        "latent_cache_max_gb where the latents stay cached once, or stay encoded every step), or steps above the "
        "run's total to train it longer (RunSummary.train_longer); base_model / base_config / datasets where a "
        'moved run\'s are now (the refusal names them; their content is compared), or "datasets.N.path" for '
        "entry N of the run's datasets alone (the others as recorded)",
    )
    queue: bool = Field(default=True, description="wait in the queue when busy (false: 409 when busy)")


class CaptionBody(_Body):
    caption: str = Field(max_length=10_000, description="the new caption (empty removes the .txt file)")
    expected: str | None = Field(
        default=None,
        max_length=10_000,
        description='the caption the edit started from ("" for none): another one there now is a 409 '
        "CaptionConflict with the current caption, nothing written; null: no check",
    )


class RenameBody(_Body):
    to: str = Field(max_length=1000, description="the dataset's new name (the rules of a new dataset's name)")


class _StrictBody(_Body):
    """A body whose fields take their own JSON types (`true` is no number, `"32"` no integer)."""

    model_config = ConfigDict(extra="forbid", strict=True)


REQUEST_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
SIDECAR_ONLY = (
    "a gallery image's .json sidecar's: accepted so that the sidecar is a body as it stands, not used"
)


class LoraRef(_StrictBody):
    name: str = Field(min_length=1, max_length=100, description="output name of a trained LoRA")
    scale: float = Field(default=1.0, ge=-LORA_SCALE_LIMIT, le=LORA_SCALE_LIMIT, allow_inf_nan=False)
    step: int | None = Field(
        default=None,
        ge=0,
        description="one of its snapshots by step (loras/<name>-step-N); null: the final LoRA",
    )
    weights: Literal["raw", "ema"] | None = Field(
        default=None,
        description='with `step`: "ema" picks the EMA weights of that step (an EMA run keeps them with each '
        'checkpoint, and in its final LoRA for the last step); null or "raw": the raw weights',
    )
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the sha256 of the LoRA file's bytes (a gallery image records it): given, a file "
        "that is no longer exactly this one is refused (400); null: the file as it is",
    )


class GenerateBody(_StrictBody):
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
    seed: int = Field(default=0, ge=0, le=SEED_MAX)  # lorastudio.generation_rules, as the CLI's
    # sizes and steps are checked against the generation budget (400 with the reason):
    # lorastudio.generation_rules.budget_problems
    # null (left out): the family's, as `lorastudio generate` takes them (FamilyOut.generation_side,
    # FamilyOut.generation_steps; the steps of the base's flavour: a step-distilled FLUX.2 klein's 4)
    steps: int | None = Field(
        default=None, description="at most 200, and width x height x steps <= 209.7 M; null: the family's"
    )
    width: int | None = Field(
        default=None, description="pixels; at most 4096, and width x height <= 4.2 MP; null: the family's"
    )
    height: int | None = Field(
        default=None, description="pixels; at most 4096, and width x height <= 4.2 MP; null: the family's"
    )
    guidance: float | None = Field(
        default=None, ge=0, le=GUIDANCE_MAX, allow_inf_nan=False, description="null: the family's default"
    )
    negative_prompt: str | None = Field(
        default=None,
        max_length=4000,
        description="what to steer away from; only for families whose pipeline takes one (FamilyOut.negative_prompt)",
    )
    max_sequence_length: int | None = Field(
        default=None,
        description="text tokens the prompt is read to (a run's sample preview: the run's max_sequence_length); "
        "only for families whose FamilyOut.supports has it, at most their max_sequence_length_max (else 4096); "
        "null: the pipeline's default, 512",
    )
    control_resolution: Literal["pipeline", "target"] | Annotated[int, Field(ge=64, le=4096)] | None = Field(
        default=None,
        description="with references: size and encode each as a run of this control_resolution trains it "
        "(a run's sample preview: its control_resolution, SampleImage.control_resolution); null: fitted to "
        "the output size and handed to the pipeline (Qwen-Image-Edit's encodes it at ~1 MP)",
    )
    loras: list[LoraRef] = Field(default_factory=list, max_length=8)
    base_identity: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{20}$",
        description="the base model's content identity a gallery image records: given, a base whose "
        "files (weights, tokenizers, scheduler) changed since (replaced, re-fetched, edited) is refused (400 "
        "base_identity); null: the base as it is",
    )
    references: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="reference images of an edit family (ids from POST /api/generate/references), slot order",
    )
    request_id: str | None = Field(
        default=None,
        pattern=REQUEST_ID_PATTERN,
        description="the client's name for this request (1-64 letters, digits, - or _): POST "
        "/api/generate/{request_id}/cancel stops it; null: cancelled only by the client leaving. "
        "Use a new one for each request: an ended request's id is refused (409) for 10 minutes. In a "
        "body with `seconds` (a gallery image's .json sidecar sent back as it is) it is the earlier "
        "render's: read and not used, the request is named afresh",
    )
    seconds: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="a gallery image's .json sidecar's (what its render took): accepted so that the sidecar "
        "is a body as it stands, and not used; given, the body's request_id is the sidecar's and not used "
        "either (the request is named afresh, as with no request_id)",
    )
    warnings: list[str] | None = Field(
        default=None, max_length=1000, description=SIDECAR_ONLY + " (its warnings)"
    )
    note: str | None = Field(default=None, max_length=1000, description=SIDECAR_ONLY + " (its client left)")


# -- responses ---------------------------------------------------------------------------------
# Shapes of what the routes return (FastAPI validates and documents them; the web UI's types are
# generated from them). Numbers that can be non-finite in training are nullable.


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ProblemOut(_Out):
    field: str
    message: str


class ErrorOut(_Out):
    error: str = Field(description="the domain error class, e.g. ConfigError")
    detail: str = Field(description="a complete, user-facing message")
    problems: list[ProblemOut] | list[str] | None = Field(
        default=None, description="ConfigError: {field, message} each; DatasetError: one string per file/fact"
    )
    current: str | None = Field(
        default=None, description='CaptionConflict: the caption as it is now ("" for none)'
    )
    dataset: str | None = Field(default=None, description="DatasetNotFound: the dataset name asked for")
    forecast_gb: float | None = Field(
        default=None, description="HostMemoryShort: the run's forecast host RAM"
    )
    available_gb: float | None = Field(
        default=None, description="HostMemoryShort: the host RAM available now"
    )


class ValidationItemOut(_Out):
    type: str = Field(description="what is wrong: missing, extra_forbidden, json_invalid, repeated_key, ...")
    loc: list[str | int] = Field(description='the path of the input: ["body", "config"], ["query", "offset"]')
    msg: str = Field(description="a user-facing message")
    input: Any = Field(default=None, description="the input as given (a secret's value is never echoed)")
    ctx: dict[str, Any] | None = Field(
        default=None, description="the rule's parameters (ge, max_length, error)"
    )


class ValidationErrorOut(_Out):
    error: str = Field(description="RequestValidationError")
    detail: list[ValidationItemOut] = Field(description="every problem of the request at once")


class DatasetSummary(_Out):
    name: str
    path: str
    images: int
    captions: int = Field(
        description="images with a caption a run reads: a .txt that is not blank, else a metadata.jsonl row "
        "that is not blank"
    )
    markup_captions: int = Field(
        description="images whose caption holds another trainer's markup (a `{trigger}`-like placeholder, "
        "kohya's `|||`), which a fresh run refuses; the dataset's detail names each (`markup` of its files). "
        "An unchanged folder's count is remembered: a caption rewritten in place is counted within ~10 s",
    )
    markup_counted: bool = Field(
        description="false where markup_captions leaves out metadata.jsonl rows: the file is over 8 MB, more "
        "than a listing reads; the dataset's detail marks each such caption and a run's Check names them"
    )
    usable: bool = Field(
        description="false for a folder made by hand under a name the studio cannot look up "
        "(`problem` says why and the fix: POST /api/datasets/{name}/rename)"
    )
    problem: str | None = Field(description="why the folder cannot be used, and the fix; null when usable")


class FamilyOut(_Out):
    name: str
    title: str
    objective: str
    latent_channels: int
    resolution_multiple: int
    lora_targets: list[str]
    defaults: dict[str, Any]
    supports: list[str]
    refuses: list[str] = Field(
        description="the family-specific settings this family cannot honour: set explicitly, they are refused"
    )
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
    generation_side: int = Field(
        default=1024,
        description="the width and height a generation that names none renders at (its training resolution)",
    )
    generation_steps: int | None = Field(
        default=None,
        description="the inference steps a generation that names none takes (a flavour of the base may "
        "take its own: a step-distilled FLUX.2 klein's 4)",
    )
    negative_prompt: bool = Field(default=False, description="generation takes a negative prompt")
    attention_backends_refused: list[str] = Field(
        default_factory=list, description="attention_backend values this family refuses (Chroma: cudnn)"
    )
    max_sequence_length_max: int | None = Field(
        default=None,
        description="the most max_sequence_length this family's text encoder reads (null: no cap)",
    )
    refuses_on: list[str] = Field(
        default_factory=list,
        description="boolean settings this family refuses turned on (Qwen-Image-Edit: random_flip)",
    )
    precisions: list[str] = Field(description="base_precision values this host can run")


class RunChoicesOut(_Out):
    precisions: list[str]
    optimizers: list[str]
    compile_modes: list[str]
    attention_backends: list[str]


class HostOut(_Out):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    device: str = Field(description='"cuda" or "cpu"')
    name: str
    memory_gb: float | None = Field(description="memory of one GPU (null on a CPU host)")
    precisions: list[str] = Field(description="the base_precision values a run can use here")
    gpu_count: int = Field(default=0, description="CUDA GPUs of this host (0: CPU only); num_gpus' limit")
    optimizers: list[str] = Field(
        default_factory=list,
        description="the optimizer values a run can use here (8-bit ones: CUDA and bitsandbytes)",
    )
    compile_modes: list[str] = Field(
        default_factory=list,
        description="the compile values a run can use here ('wide' also needs a family with wide_compile)",
    )
    attention_backends: list[str] = Field(
        default_factory=list,
        description="the attention_backend values with a kernel on this GPU (cudnn and flash: compute capability"
        " 8.0+; fa4: a Hopper / Blackwell GPU, and flash_attn.cute, which the run's start checks)",
    )
    run_choices: list[RunChoicesOut] = Field(
        default_factory=list,
        description="item k-1: what a run over the first k GPUs may use (num_gpus = k): the choices above"
        " of the weakest of them, as the job service judges it; [] off CUDA",
    )


class ModelOut(_Out):
    name: str = Field(description="folder name under models/ (usable as base_model)")
    path: str
    family: str | None = Field(description="the family that trains this pipeline, if any")


class ConfigRulesOut(_Out):
    """Rules of TrainConfig the UI follows to offer only what the server accepts
    (lorastudio.config_choices)."""

    choice_settings: dict[str, dict[str, list[str]]] = Field(
        description="{select field: {choice: the settings it reads}}: the settings of the other choices "
        "are refused (optimizer, adapter, loss)"
    )
    null_means_off: list[str] = Field(
        description="settings where an explicit null means off (a family default does not replace it)"
    )


class NameCheckOut(_Out):
    refuse: str = Field(description="a JavaScript regular expression a refused name (NFC) matches")
    flags: str = Field(description="its flags ('u', 'iu' or '')")
    reason: str = Field(description="the server's reason; {name} stands for the name in quotes")


class NameRuleOut(_Out):
    """What a new dataset name must be (lorastudio.data.name_rule, data.paths.new_name's rules)."""

    checks: list[NameCheckOut] = Field(description="in order: the first that matches refuses the name")
    max_bytes: int = Field(description="the most bytes the name takes in UTF-8")
    bytes_reason: str


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
    config_rules: ConfigRulesOut
    dataset_name_rule: NameRuleOut = Field(description="what a new dataset's name must be (the form's check)")


class DroppedFile(_Out):
    file: str
    reason: str
