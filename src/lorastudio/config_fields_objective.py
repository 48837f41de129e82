"""TrainConfig's loss and objective fields (the objective ones are family-specific: FAMILY_SPECIFIC_FIELDS)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lorastudio.config_fields_base import StrictFields

TimestepSampling = Literal["logit_normal", "uniform", "sigmoid"]
LossName = Literal["mse", "l1", "huber", "smooth_l1"]
HuberSchedule = Literal["constant", "exponential", "snr"]


class ObjectiveFields(StrictFields):
    """The loss function and the family's training objective (noise, timesteps, shift, guidance)."""

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
    timestep_sampling: TimestepSampling = Field(
        default="logit_normal",
        description="flow families: how training noise levels are drawn: logit_normal (sigmoid of "
        "N(logit_mean, logit_std)) | uniform | sigmoid (sigmoid of N(0, 1); Chroma's and Krea 2's default)",
    )
    logit_mean: float = Field(
        default=0.0,
        ge=-10,
        le=10,
        description="logit_normal sampling: the mean (above 0: noisier levels more often, as the SD3 paper reads "
        "it; diffusers' DreamBooth scripts' --logit_mean m is -m here: their sigma is about 1 - u)",
    )
    logit_std: float = Field(
        default=1.0, gt=0, le=10, description="logit_normal sampling: the spread of the noise levels"
    )
    flow_shift: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="flow families: a static shift s of the sampled noise levels, s*x / (1 + (s-1)*x) (null: "
        "the shift the family's pipeline uses at inference for the image size; FLUX.1 and Kontext: none, the "
        "sampled levels as they are)",
    )
    guidance: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="guidance-distilled bases (FLUX.1, Kontext, FLUX.2 dev): the guidance value fed to the "
        "denoiser's guidance embedding while training (null: the family's default; another value is refused for a "
        "base without the embedding, e.g. FLUX.1 schnell)",
    )
    max_sequence_length: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="text tokens per caption the text encoder reads, the family's prompt template included "
        "(longer captions are cut and named in the run's dataset warnings; null: the family's default)",
    )
    assistant_lora: str | None = Field(
        default=None,
        min_length=1,
        description="step-distilled (turbo) bases only: a LoRA merged into the frozen base while "
        "training, so the distilled model does not collapse under the new LoRA; never part of the "
        "saved LoRA nor of inference. A .safetensors file (absolute path) or a hub file "
        "owner/repo/path.safetensors, e.g. ostris/zimage_turbo_training_adapter/"
        "zimage_turbo_training_adapter_v2.safetensors for Z-Image Turbo",
    )
