"""TrainConfig: the one strict training configuration shared by the CLI, the API and the jobs.

Rules:
- unknown keys are errors, and every problem is reported at once (`parse_train_config`);
- a field left at None means "the family's default" and is filled by `resolve_train_config`;
- a family-specific field (see `FAMILY_SPECIFIC_FIELDS`) that the user sets explicitly for a
  family that cannot honour it is refused, never silently ignored.
This module is the schema; parsing and resolving are in config_resolve.py (importable from here).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lorastudio.config_datasets import MAX_DATASET_ENTRIES, DatasetEntry, check_resolution
from lorastudio.config_preservation import Preservation
from lorastudio.config_samples import MAX_SAMPLE_PROMPT_CHARS, MAX_SAMPLE_PROMPTS, SamplePrompt, prompt_text

LrScheduler = Literal[
    "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial"
]
BasePrecision = Literal["auto", "fp32", "bf16", "fp16", "fp8", "int8", "nf4"]
CheckpointingMode = Literal["auto", "off", "selective", "full"]
LatentCacheMode = Literal["auto", "memory", "disk", "off"]
TimestepSampling = Literal["logit_normal", "uniform", "sigmoid"]
LoraFormat = Literal["diffusers", "kohya"]
CompileMode = Literal["off", "on", "auto", "wide"]
AttentionBackend = Literal["auto", "cudnn", "flash", "efficient", "math", "fa4"]
FuseProjections = Literal["auto", "on", "off"]
AdapterName = Literal["lora", "dora", "loha", "lokr"]
OptimizerName = Literal["adamw", "adamw8bit", "lion8bit", "prodigy", "adafactor"]
LossName = Literal["mse", "l1", "huber", "smooth_l1"]
SaveDtype = Literal["fp32", "bf16", "fp16"]
HuberSchedule = Literal["constant", "exponential", "snr"]

# Fields that only some families honour. A family lists the ones it supports in
# FamilySpec.supports; setting one explicitly for another family is a ConfigError.
FAMILY_SPECIFIC_FIELDS: tuple[str, ...] = (
    "snr_gamma",
    "noise_offset",
    "timestep_sampling",
    "logit_mean",
    "logit_std",
    "flow_shift",
    "guidance",
    "max_sequence_length",
    "train_text_encoder",
    "text_encoder_lr",
    "v_prediction",
)


# A hub revision (branch, tag or commit): the one rule of every place that takes one (training
# config, generate, model fetch; see revision_problem).
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


def revision_problem(revision: str) -> str | None:
    """Why `revision` is not a hub branch, tag or commit name (None when it is one)."""
    if not REVISION.fullmatch(revision) or ".." in revision:
        return f"{revision[:80]!r} is not a branch, tag or commit"
    return None


class TrainConfig(BaseModel):
    """Everything that defines one training run. See the field descriptions for units/defaults."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # what to train on
    family: str = Field(description="model family: a registered name (`lorastudio families`, /api/info)")
    base_model: str = Field(
        min_length=1,
        description="hub id (owner/name), local pipeline folder, or single-file checkpoint (.safetensors)",
    )
    revision: str | None = Field(default=None, description="hub revision (branch, tag or commit)")
    base_config: str | None = Field(
        default=None,
        min_length=1,
        description="single-file base_model (.safetensors): the pipeline folder or hub id whose configs, "
        "tokenizers, scheduler and missing components (FLUX.1 / Chroma: text encoders and VAE) are used; "
        "default: the original model's hub id (e.g. stabilityai/stable-diffusion-xl-base-1.0)",
    )
    v_prediction: bool | None = Field(
        default=None,
        description="SDXL single-file checkpoint: train and sample it as v-prediction (true) or epsilon "
        "(false); unset: as the file says (its v_pred key), else the base config's scheduler",
    )
    data_dir: str | None = Field(
        default=None,
        min_length=1,
        description="dataset folder (absolute, or a name under datasets/): shorthand for one datasets entry",
    )
    # issue 29 part 1: several folders, each with its own sampling and captions (config_datasets.py)
    datasets: list[DatasetEntry] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DATASET_ENTRIES,
        description="several dataset folders, each {path, repeats | weight, trigger_word, default_caption, "
        "caption_dropout, resolution, loss_weight, regularisation}; instead of data_dir",
    )
    prior_loss_weight: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="multiplies the loss of the samples of regularisation entries (datasets entries with "
        "regularisation = true; kohya's prior_loss_weight)",
    )
    preservation: Preservation | None = Field(
        default=None,
        description="differential output preservation, {class_word, weight, prompts}: the LoRA's output on "
        "the captions with the trigger word replaced by class_word (or on prompts) is pulled to the base "
        "model's (the LoRA disabled), computed in the same step (one extra no-grad forward and one extra "
        "forward + backward per micro-batch)",
    )
    kohya_folders: bool = Field(
        default=False,
        description="each dataset folder holds kohya <repeats>_<words> sub-folders: each one is an entry "
        "(repeats from the number, trigger word and default caption from the words)",
    )
    output_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="name of the run's output folder and LoRA file (default: family-date-time)",
    )

    # data
    resolution: int | list[int] | None = Field(
        default=None,
        description="training side in pixels; a list ([512, 768, 1024]) trains every image at each, with "
        "the buckets of each",
    )
    aspect_buckets: bool = Field(default=True, description="batch images by aspect ratio (else square)")
    # issue 29 part 5: no enlargement of small images (data.buckets.choose_bucket)
    no_upscale: bool = Field(
        default=False,
        description="train an image smaller than its bucket at the largest bucket inside its own size "
        "instead of upscaling it",
    )
    random_crop: bool = Field(default=False, description="random instead of centre crop")
    random_flip: bool = Field(default=False, description="horizontal flip augmentation")
    cache_variants: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="crop/flip variants cached per image (default 4 with random crop, 2 with flip only, else 1)",
    )
    latent_cache_max_gb: float = Field(
        default=8.0,
        ge=0,
        le=1024,
        description="RAM budget of the latent cache; above it, the disk cache (auto) or encode per step",
    )
    # issue 31 part 6: the on-disk latent cache (data/disk_cache.py, training/latents_disk.py)
    latent_cache: LatentCacheMode = Field(
        default="auto",
        description="where VAE latents are cached: memory (RAM up to latent_cache_max_gb, else encoded "
        "per step), disk (memory-mapped shards kept across runs), auto (memory when it fits, else disk), "
        "off (encoded every step)",
    )
    trigger_word: str | None = Field(default=None, max_length=200, description="prepended to captions")
    default_caption: str | None = Field(
        default=None, max_length=2000, description="caption of images without one (instance prompt)"
    )
    caption_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="probability of an empty caption")
    # issue 29 part 3: caption augmentation (data/caption_variants.py)
    shuffle_tags: bool = Field(
        default=False, description="shuffle each caption's comma-separated tags (after the first keep_tokens)"
    )
    keep_tokens: int = Field(
        default=0,
        ge=0,
        le=100,
        description="tags at the start of a caption kept in place (the trigger word is one)",
    )
    tag_dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="probability of dropping each tag after the first keep_tokens",
    )
    caption_variants: int | None = Field(
        default=None,
        ge=2,
        le=64,
        description="with shuffle_tags / tag_dropout: caption variants drawn per image and encoded once each "
        "(their text embeddings are cached; null: 8)",
    )
    control_dirs: list[str] = Field(
        default_factory=list,
        max_length=9,
        description="paired datasets: parallel folders of control images matched to the targets by file "
        "stem, folder N = control slot N after the dataset's control/, control_2/ ... sub-folders "
        "(each absolute, or a name under datasets/, like data_dir)",
    )

    # issue 27: the size controls train at (data/control_sizing.py); musubi-tuner's name
    control_resolution: Literal["pipeline", "target"] | Annotated[int, Field(ge=64, le=4096)] = Field(
        default="pipeline",
        description="paired datasets: the size each control image trains at: 'pipeline' = the size the "
        "family's edit pipeline encodes a reference at (Qwen-Image-Edit ~1 MP in its own aspect ratio, "
        "FLUX.1 Kontext its preferred resolutions, FLUX.2 capped at 1 MP), 'target' = resized to cover "
        "its target's bucket and cropped like it, or a side N = the pipeline's rule at an N x N area",
    )

    # masked loss (issue 29 part 4; data/masks.py): a dataset's masks/ folder (same file stems), or alpha
    alpha_mask: bool = Field(
        default=False,
        description="use each image's alpha channel as its loss mask (opaque = trained, transparent = "
        "unmasked_weight) instead of a masks/ folder; images without alpha train unmasked (named by the preflight)",
    )
    unmasked_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="loss weight of the pixels outside an image's mask (masks/ folder of the dataset, grey = "
        "in between, or alpha_mask); 0 = they teach nothing",
    )

    # validation loss (issue 29 part 6; data/holdout.py, training/validate.py)
    validation_split: float | str | None = Field(
        default=None,
        description="images held out of training for the validation loss: a fraction of the dataset (0-1, "
        "chosen by the seed) or a folder (absolute, or a name under datasets/) of validation images; null = off",
    )
    validate_every: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="with validation_split: the mean loss over the held-out images at fixed noise levels and "
        "seeds every N optimizer steps and after the last one; each round also writes the LoRA snapshot of "
        "its step, so the best one is marked and kept (null: only after the last step)",
    )

    # schedule
    steps: int = Field(
        default=1000, ge=1, le=10_000_000, description="optimizer steps (ignored if num_epochs>0)"
    )
    num_epochs: int = Field(default=0, ge=0, le=100_000, description="if > 0, overrides steps")
    batch_size: int = Field(default=1, ge=1, le=256)
    grad_accum: int = Field(default=1, ge=1, le=1024, description="micro-batches per optimizer step")
    learning_rate: float | None = Field(default=None, gt=0, le=1.0)
    lr_scheduler: LrScheduler = "constant"
    lr_warmup_steps: int = Field(default=0, ge=0)
    weight_decay: float = Field(default=1e-4, ge=0, le=1.0)
    max_grad_norm: float | None = Field(default=1.0, gt=0, description="gradient clipping; null = off")
    seed: int = Field(default=42, ge=0, le=2**32 - 1)

    # LoRA
    lora_rank: int | None = Field(default=None, ge=1, le=1024)
    lora_alpha: float | None = Field(default=None, gt=0, le=4096, description="default: equal to the rank")
    lora_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    lora_targets: list[str] | None = Field(default=None, min_length=1, description="module name suffixes")

    # training methods (issue 28): the optimizer and its options (config_rules.OPTIMIZER_OPTIONS
    # says which optimizer reads which option; an option of another optimizer is refused), EMA
    optimizer: OptimizerName = Field(
        default="adamw",
        description="adamw (torch, fused kernel) | adamw8bit / lion8bit (bitsandbytes, CUDA; pip install "
        "lorastudio[bnb]) | prodigy (prodigyopt: learns its own step size; learning_rate is a multiplier, "
        "default 1.0) | adafactor (transformers: factored second moments, the least optimizer memory)",
    )
    optimizer_betas: tuple[float, float] | None = Field(
        default=None,
        description="[beta1, beta2] of adamw / adamw8bit / lion8bit / prodigy (null: the optimizer's own, "
        "0.9, 0.999; Lion 0.9, 0.99)",
    )
    optimizer_eps: float | None = Field(
        default=None, gt=0, le=1, description="epsilon of adamw / adamw8bit / prodigy (null: 1e-8)"
    )
    prodigy_d_coef: float | None = Field(
        default=None, gt=0, le=100, description="prodigy: multiplier of the learned step size (null: 1.0)"
    )
    prodigy_safeguard_warmup: bool | None = Field(
        default=None,
        description="prodigy: leave the LR out of the step-size estimate (for warmup; null: off)",
    )
    prodigy_use_bias_correction: bool | None = Field(
        default=None, description="prodigy: Adam's bias correction (null: off)"
    )
    adafactor_relative_step: bool | None = Field(
        default=None,
        description="adafactor: its own time-dependent step size instead of learning_rate (null: off); "
        "then learning_rate, lr_scheduler and warmup are Adafactor's and cannot be set",
    )
    adafactor_scale_parameter: bool | None = Field(
        default=None, description="adafactor: scale the step by each parameter's RMS (null: off)"
    )
    adafactor_warmup_init: bool | None = Field(
        default=None, description="adafactor: warm the relative step up from 1e-6 (needs relative_step)"
    )

    ema_decay: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="EMA of the adapter weights (0.99-0.9999 typical): the saved LoRA is the EMA one, the raw "
        "one is kept beside it as <name>.raw.safetensors; null = off",
    )
    ema_update_every: int = Field(
        default=1, ge=1, le=10_000, description="EMA update every N optimizer steps"
    )
    ema_on_cpu: bool = Field(default=False, description="keep the EMA weights in CPU memory")
    sample_with_ema: bool = Field(
        default=True,
        description="with ema_decay: sample previews render the EMA weights (false: the raw ones)",
    )

    adapter: AdapterName = Field(
        default="lora",
        description="lora | dora (LoRA with a learned magnitude per output row) | loha (Hadamard product of "
        "two low-rank pairs) | lokr (Kronecker product: small files, the usual fix for weak Z-Image / FLUX.2 "
        "LoRAs); peft's implementations. loha / lokr files are written in the LyCORIS layout ComfyUI reads "
        "(lora_format kohya: diffusers cannot load them)",
    )
    lokr_factor: int | None = Field(
        default=None,
        ge=-1,
        le=1024,
        description="lokr: the Kronecker factor of each dimension (peft's decompose_factor; -1 = as square "
        "as possible; null: -1)",
    )
    lokr_decompose_both: bool | None = Field(
        default=None,
        description="lokr: low-rank w1 too (null: off, w1 is a full matrix; w2 is low-rank when the rank is "
        "below half its size)",
    )
    rank_pattern: dict[str, int] | None = Field(
        default=None,
        description="per-module ranks, {module name or regex: rank} (peft's rank_pattern); others: lora_rank",
    )
    alpha_pattern: dict[str, float] | None = Field(
        default=None,
        description="per-module alphas, {module name or regex: alpha} (peft's alpha_pattern); others: lora_alpha",
    )

    # SDXL text-encoder LoRA (family-specific; training/text_encoders.py)
    train_text_encoder: bool = Field(
        default=False,
        description="SDXL: train a LoRA on both CLIP text encoders too (q/k/v/out projections, lora_rank / "
        "lora_alpha); captions are then encoded in every step instead of once; saved with the U-Net's "
        "(diffusers text_encoder. / text_encoder_2., kohya lora_te1_ / lora_te2_)",
    )
    text_encoder_lr: float | None = Field(
        default=None,
        gt=0,
        le=1.0,
        description="SDXL with train_text_encoder: its learning rate (null: learning_rate)",
    )

    # numerics
    base_precision: BasePrecision = Field(
        default="auto",
        description=(
            "frozen base: auto = bf16 on a capable GPU, else fp32 (with memory_budget_gb: the fastest"
            " measured plan that fits); fp8 = fp8 matmuls on bf16 weights (Ada/Hopper GPUs);"
            " int8 / nf4 = quantised base weights with bf16 compute (QLoRA)"
        ),
    )
    gradient_checkpointing: CheckpointingMode = Field(
        default="auto",
        description=(
            "recompute activations in the backward: selective = the cheap ops only, full = every"
            " repeated block; auto = off (with memory_budget_gb: what the measured plan needs)"
        ),
    )
    offload_blocks: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description=(
            "repeated blocks kept in CPU RAM and moved to the GPU in turn (block swap);"
            " null = auto: 0 (with memory_budget_gb: what the measured plan needs)"
        ),
    )
    micro_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description=(
            "samples per forward/backward pass (batch_size must divide by it; same maths);"
            " null = batch_size (with memory_budget_gb: what the measured plan needs)"
        ),
    )
    memory_budget_gb: float | None = Field(
        default=None,
        gt=0,
        le=4096,
        description=(
            "GPU memory the run may use: the settings left at auto (precision, checkpointing, block"
            " swap, micro-batch) are chosen by measuring a few real steps; null = no budget"
        ),
    )
    enable_tf32: bool = Field(default=True, description="TF32 matmuls for the run (restored after)")

    # checkpoints, divergence and output format
    save_every: int | None = Field(
        default=None, ge=1, description="checkpoint every N optimizer steps (null: only on stop-and-save)"
    )
    keep_last: int = Field(default=2, ge=1, le=1000, description="checkpoints retained (oldest removed)")
    save_lora_every: int | None = Field(
        default=None,
        ge=1,
        description="write a LoRA snapshot (loras/<name>-step-N, the run's lora_format + sidecar) every N "
        "optimizer steps; every checkpoint writes one too (null: only with checkpoints)",
    )
    keep_loras: int | None = Field(
        default=None, ge=1, le=100_000, description="LoRA snapshots retained (oldest removed; null: all)"
    )
    max_bad_steps: int = Field(
        default=5, ge=1, le=1000, description="consecutive non-finite steps before the run fails as diverged"
    )
    lora_format: LoraFormat = Field(
        default="diffusers",
        description="key layout of the LoRA file: diffusers/peft names or kohya's; unset: the family's "
        "portable layout (kohya for SDXL, diffusers for FLUX.1/Qwen-Image/Z-Image; both load in ComfyUI "
        "and diffusers at the trained strength)",
    )
    save_dtype: SaveDtype = Field(
        default="fp32",
        description="dtype of the tensors in the LoRA files (the run's LoRA, its EMA / raw pair, snapshots): "
        "fp32 (default, the trained weights exactly) | bf16 / fp16 (half the size); checkpoints stay fp32",
    )

    # sample previews (rendered with the live LoRA; they never change the training maths)
    sample_prompts: list[str | SamplePrompt] = Field(
        default_factory=list,
        max_length=MAX_SAMPLE_PROMPTS,
        description="validation prompts rendered during training (one image each, at the training "
        "resolution): a prompt, or an object that also sets its own width, height, seed and guidance "
        'and, for an edit family, "controls": [reference images relative to data_dir, or to the first '
        "datasets entry's folder]",
    )
    sample_every: int | None = Field(
        default=None, ge=1, description="render the samples every N optimizer steps (null: only at the end)"
    )
    sample_steps: int | None = Field(
        default=None, ge=1, le=1000, description="inference steps per sample (null: the family's default)"
    )
    sample_seed: int = Field(default=0, ge=0, le=2**32 - 1, description="noise seed of every sample")
    report_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list,
        max_length=2,
        description="experiment trackers (optional extras): loss, LR, grad norm, samples/s, memory and "
        "sample images to TensorBoard (<run>/tensorboard) and/or Weights & Biases",
    )

    # speed
    num_gpus: int = Field(
        default=1,
        ge=1,
        le=64,
        description="data-parallel processes (one per GPU), launched by torchrun / accelerate launch",
    )
    compile: CompileMode = Field(
        default="auto",
        description="regional torch.compile of the repeated blocks: auto = on for CUDA; wide (SDXL, CUDA) "
        "also compiles the U-Net's ResNet blocks and samplers (faster steps, longer first step)",
    )
    attention_backend: AttentionBackend = Field(
        default="auto",
        description="SDPA kernel: auto = on CUDA for the transformer families, FlashAttention-4 (extra "
        "lorastudio[fa4], Hopper/Blackwell) when a probe at the run's shapes finds it correct and faster, else "
        "cuDNN when its probe passes, else flash; fa4 / cudnn / flash / efficient / math = that one first",
    )

    fuse_projections: FuseProjections = Field(
        default="auto",
        description="run each transformer block's projections that read one input (q/k/v, and FLUX.1's "
        "MLP input, Z-Image's SwiGLU, SDXL's cross-attention k/v) as one matmul, their LoRAs too; the LoRA "
        "file is unchanged. auto = on for a bf16 / fp16 base on CUDA without checkpointing, block swap or "
        "LoRA dropout (measured 1.7-3.7 % faster on an H200); on: any bf16 / fp16 / fp32 base (not fp8 / "
        "int8 / nf4)",
    )

    # the loss (issue 28; training/losses.py): every family and objective
    loss: LossName = Field(
        default="mse",
        description="mse | l1 | huber (pseudo-Huber 2c(sqrt(r^2 + c^2) - c): MSE-like below huber_c, L1-like "
        "above, robust to outliers) | smooth_l1 (huber / c); min-SNR weighting (SDXL) applies on top",
    )
    huber_c: float | None = Field(
        default=None,
        gt=0,
        le=10,
        description="huber / smooth_l1: the threshold c (null: 0.1); with a schedule, its value at pure noise",
    )
    huber_schedule: HuberSchedule | None = Field(
        default=None,
        description="huber / smooth_l1: c by noise level: constant (null) | exponential (1 on clean "
        "latents decaying to huber_c at pure noise) | snr ((1 - c)/(1 + noise/signal)^2 + c, as SimpleTuner)",
    )

    # objective (family-specific: see FAMILY_SPECIFIC_FIELDS)
    snr_gamma: float | None = Field(
        default=5.0, gt=0, description="min-SNR weighting (DDPM families); null = off"
    )
    noise_offset: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="DDPM families: add noise_offset x N(0, 1) per image and channel to the training "
        "noise, so the LoRA can learn darker darks and brighter brights (0.03-0.1 typical); null = off",
    )
    timestep_sampling: TimestepSampling = Field(default="logit_normal", description="flow families")
    logit_mean: float = Field(default=0.0, ge=-10, le=10)
    logit_std: float = Field(default=1.0, gt=0, le=10)
    flow_shift: float | None = Field(default=None, gt=0, le=100, description="static sigma shift (flow)")
    guidance: float | None = Field(default=None, ge=0, le=100, description="guidance-distilled bases")
    max_sequence_length: int | None = Field(default=None, ge=1, le=4096, description="text tokens")
    assistant_lora: str | None = Field(
        default=None,
        min_length=1,
        description="step-distilled (turbo) bases only: a LoRA merged into the frozen base while "
        "training, so the distilled model does not collapse under the new LoRA; never part of the "
        "saved LoRA nor of inference. A .safetensors file (absolute path) or a hub file "
        "owner/repo/path.safetensors, e.g. ostris/zimage_turbo_training_adapter/"
        "zimage_turbo_training_adapter_v2.safetensors for Z-Image Turbo",
    )

    @field_validator("gradient_checkpointing", mode="before")
    @classmethod
    def _checkpointing_bool(cls, v: Any) -> Any:
        """true / false (the older boolean form) mean full / off."""
        if isinstance(v, bool):
            return "full" if v else "off"
        return v

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @field_validator("resolution")
    @classmethod
    def _resolution_sides(cls, v: int | list[int] | None) -> int | list[int] | None:
        return check_resolution(v)

    @field_validator("validation_split")
    @classmethod
    def _split_shape(cls, v: float | str | None) -> float | str | None:
        if isinstance(v, float | int) and not isinstance(v, bool) and not 0 < v < 1:
            raise ValueError("a fraction must be between 0 and 1 (exclusive); or give a folder")
        if isinstance(v, str) and not v.strip():
            raise ValueError("must be a fraction or a folder, not empty")
        return v

    @field_validator("lokr_factor")
    @classmethod
    def _factor_not_zero(cls, v: int | None) -> int | None:
        if v == 0:
            raise ValueError("must be -1 (as square as possible) or a factor >= 1")
        return v

    @field_validator("rank_pattern", "alpha_pattern")
    @classmethod
    def _patterns_positive(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            for key, value in v.items():
                if not key.strip():
                    raise ValueError("module patterns must be non-empty")
                if not (0 < value <= 4096):
                    raise ValueError(f"{key!r}: must be in (0, 4096]")
        return v

    @field_validator("optimizer_betas")
    @classmethod
    def _betas_in_range(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not all(0.0 <= b < 1.0 for b in v):
            raise ValueError("each beta must be in [0, 1)")
        return v

    @field_validator("sample_prompts")
    @classmethod
    def _prompts_sized(cls, v: list[str | SamplePrompt]) -> list[str | SamplePrompt]:
        for i, prompt in enumerate(prompt_text(entry) for entry in v):
            if not prompt.strip():
                raise ValueError(f"prompt {i} is empty")
            if len(prompt) > MAX_SAMPLE_PROMPT_CHARS:
                raise ValueError(f"prompt {i} is longer than {MAX_SAMPLE_PROMPT_CHARS} characters")
        return v

    @field_validator("revision")
    @classmethod
    def _revision_shape(cls, v: str | None) -> str | None:
        if v is not None and (problem := revision_problem(v)):
            raise ValueError(problem)
        return v

    @field_validator("lora_targets")
    @classmethod
    def _targets_nonempty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and any(not t.strip() for t in v):
            raise ValueError("target module names must be non-empty")
        return v


# The parse / resolve functions live in config_resolve.py (this module is the schema); callers
# import them from here: they are looked up there on first use (PEP 562), which keeps the import
# order free of cycles (config_resolve imports TrainConfig from here).
_RESOLVE_NAMES = frozenset({"family_problems", "parse_train_config", "resolve_train_config"})


def __getattr__(name: str) -> Any:
    if name in _RESOLVE_NAMES:
        from lorastudio import config_resolve

        return getattr(config_resolve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
