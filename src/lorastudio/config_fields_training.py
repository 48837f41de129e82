"""TrainConfig's optimisation fields: the schedule, the LoRA / adapter, the optimizer, EMA, text-encoder LoRA."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from lorastudio.config_fields_base import StrictFields

LrScheduler = Literal[
    "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial"
]
AdapterName = Literal["lora", "dora", "loha", "lokr"]
OptimizerName = Literal["adamw", "adamw8bit", "lion8bit", "prodigy", "adafactor"]


# Settings newer than a version a user may roll back to (session 35's start, 45437a2e), left out
# of every dump of a config while null (`exclude_if`): the run store's records, a checkpoint's
# config and identity, the sidecars, the config download. That version's TrainConfig forbids
# keys it does not know, so one written as null ("init_lora": null) made it refuse every resume
# and every config file this version wrote, of runs that never used the setting (RELIABILITY
# 1330). A config without the key reads back the same here (null is the default), and a
# checkpoint's identity without it resumes (training/resume/identity.py). The API's answers keep the key
# (api/schemas_runs.TrainConfigOut).
LEFT_OUT_WHEN_NULL: tuple[str, ...] = ("init_lora",)
# Likewise left out of every dump at its default (session 38, RELIABILITY 1681): a run that keeps
# it writes nothing the older version refuses; the identity records the validation noise's rule
# instead (training/resume/identity_rules.VALIDATION_NOISE_RULE). The API's answers keep the key.
LEFT_OUT_AT_DEFAULT: tuple[str, ...] = ("validation_seed",)


def _null(value: object) -> bool:
    return value is None


class TrainingFields(StrictFields):
    """The schedule, the adapter and its ranks, the optimizer and its options, EMA, SDXL text-encoder LoRA."""

    # schedule
    steps: int = Field(
        default=1000, ge=1, le=10_000_000, description="optimizer steps (ignored if num_epochs>0)"
    )
    num_epochs: int = Field(default=0, ge=0, le=100_000, description="if > 0, overrides steps")
    batch_size: int = Field(
        default=1,
        ge=1,
        le=256,
        description="images per batch (one bucket); grad_accum batches make an optimizer step",
    )
    grad_accum: int = Field(default=1, ge=1, le=1024, description="micro-batches per optimizer step")
    learning_rate: float | None = Field(
        default=None,
        gt=0,
        le=1.0,
        description="peak learning rate of the adapter (null: the family's default, `lorastudio families`; "
        "prodigy: 1.0, a multiplier of its learned step size)",
    )
    lr_scheduler: LrScheduler = Field(
        default="constant",
        description="learning-rate schedule over the run's optimizer steps (diffusers' get_scheduler): constant | "
        "constant_with_warmup | linear | cosine | cosine_with_restarts (lr_cycles cosines) | polynomial (decay to ~0 "
        "at the last step, at lr_power)",
    )
    lr_warmup_steps: int = Field(
        default=0,
        ge=0,
        description="optimizer steps of linear warmup from 0 to learning_rate (not with the constant schedule; "
        "fewer than the run's steps)",
    )
    lr_cycles: int | None = Field(
        default=None,
        ge=2,
        le=10_000,
        description="cosine_with_restarts: the cosine cycles over the run after the warmup, each restarting at "
        "learning_rate (diffusers' num_cycles); required by it (one cycle is the cosine schedule)",
    )
    lr_power: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="polynomial: the power of the decay to ~0 (null: 1.0, a straight line; 2: faster early, "
        "slower late)",
    )
    weight_decay: float = Field(
        default=1e-4,
        ge=0,
        le=1.0,
        description="decoupled weight decay of the optimizer on the adapter weights",
    )
    max_grad_norm: float | None = Field(default=1.0, gt=0, description="gradient clipping; null = off")
    seed: int = Field(
        default=42,
        ge=0,
        le=2**32 - 1,
        description="seed of the adapter's initial weights, the data order, crops, flips, noise and timesteps: "
        "the same seed, settings and data train the same run",
    )

    # LoRA
    lora_rank: int | None = Field(
        default=None, ge=1, le=1024, description="rank of each adapter layer (null: the family's default)"
    )
    lora_alpha: float | None = Field(default=None, gt=0, le=4096, description="default: equal to the rank")
    lora_dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="dropout probability on the adapter's input (peft's lora_dropout)",
    )
    lora_targets: list[str] | None = Field(
        default=None,
        min_length=1,
        description='suffixes of the denoiser\'s module names that get an adapter, e.g. ["to_q", "to_k"] '
        "(null: the family's targets)",
    )
    init_lora: str | None = Field(
        default=None,
        exclude_if=_null,  # LEFT_OUT_WHEN_NULL
        min_length=1,
        max_length=4096,
        description="start from this LoRA's weights instead of a fresh adapter: a .safetensors file "
        "(absolute, ~/..., or relative: the CLI's to its directory, the server's under outputs/) or a trained "
        "LoRA's name (outputs/NAME/NAME.safetensors); "
        "lorastudio's own files and kohya / ComfyUI / diffusers / OneTrainer ones of the run's family. "
        "lora_rank / lora_alpha null take the file's; targets the file lacks start fresh (a warning); "
        "a resume takes its weights from the checkpoint, not from this file",
    )

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
        "one is kept beside it as <name>.raw.safetensors; null = off. No warmup: the start keeps decay^updates of "
        "the saved LoRA, so a decay too slow for the run's length is named by its warnings (0.9999 wants ~30000 "
        "steps)",
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
        "(lora_format kohya); diffusers loads a lokr file of FLUX.2, FLUX.2 klein and Z-Image, no other "
        "loha / lokr file (the run's check and the file's sidecar say where each loads)",
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

    # SDXL text-encoder LoRA (family-specific; training/adapters/text_encoders.py)
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

    @field_validator("lora_targets")
    @classmethod
    def _targets_nonempty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and any(not t.strip() for t in v):
            raise ValueError("target module names must be non-empty")
        return v
