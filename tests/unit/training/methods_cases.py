"""Shared pieces of the training-method tests (optimizers, EMA, adapters): a fixed-batch mini run
on a tiny denoiser (the same latents, conditioning and noise every step, so the loss of a method
that learns must fall) built from the engine's own parts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.families.single_file import model_source
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.noise import make_objective
from lorastudio.training.optim import make_lr_scheduler, make_optimizer
from lorastudio.training.step import forward_backward

CPU = torch.device("cpu")


def mini_config(family: str, model_dir: Path, **overrides: Any) -> TrainConfig:
    """A resolved config for a fixed-batch run on the tiny `family` model (an override of None
    removes the setting: learning_rate=None leaves it to the family / optimizer)."""
    spec = families.get(family).spec
    extra = {"max_sequence_length": 16} if "max_sequence_length" in spec.supports else {}
    raw = {
        "family": family, "base_model": str(model_dir), "data_dir": "unused", "lora_rank": 4,
        "learning_rate": 1e-2, "resolution": max(32, 2 * spec.resolution_multiple),  # mini_batch's size
        "output_name": "m", **extra, **overrides,
    }  # fmt: skip
    raw = {k: v for k, v in raw.items() if v is not None}  # learning_rate=None: the optimizer's default
    return resolve_train_config(TrainConfig.model_validate(raw))


@dataclass
class MiniRun:
    losses: list[float]
    denoiser: Any
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer


@dataclass
class MiniBatch:
    """The fixed batch of a mini run and the freshly adapted denoiser it trains."""

    family: Any
    denoiser: Any
    params: list[torch.nn.Parameter]
    objective: Any
    latents: torch.Tensor  # [2, C, h, w]
    cond: dict[str, Any]
    info: dict[str, Any]


def mini_batch(cfg: TrainConfig) -> MiniBatch:
    """The tiny `cfg.family` denoiser with a fresh adapter (seed 0), its objective, and one fixed
    batch of 2 random latents with 2 captions (what mini_run trains on)."""
    fam = families.get(cfg.family)
    spec, model = fam.spec, model_source(cfg)  # a folder, or a single file with its base config
    encoders = fam.load_text_encoders(model, None, torch.float32, CPU)
    cond = fam.collate_conditioning(fam.encode_prompts(encoders, ["a red circle", "a blue square"], cfg))
    size = max(32, 2 * spec.resolution_multiple)
    side = size // spec.vae_scale_factor
    latents = torch.randn(2, spec.latent_channels, side, side, generator=torch.Generator().manual_seed(1))
    info = {"original_size": [(size, size)] * 2, "crop_top_left": [(0, 0)] * 2, "target_size": (size, size)}
    denoiser = fam.load_denoiser(model, None, torch.float32, CPU)
    torch.manual_seed(0)
    params = add_lora(denoiser, lora_config_for(cfg, spec.lora_targets))
    denoiser.train()
    objective = make_objective(fam, cfg, fam.scheduler_config(model, None))
    return MiniBatch(fam, denoiser, params, objective, latents, cond, info)


NOISE_SEED = 10  # the generator seed of every mini-run step (the same noise and timesteps)


def mini_run(cfg: TrainConfig, steps: int = 6) -> MiniRun:
    """`steps` optimizer steps of cfg's optimizer (and schedule) on one fixed batch of 2 random
    latents with 2 captions and the same noise every step; losses measured before each update."""
    mb = mini_batch(cfg)
    optimizer = make_optimizer(mb.params, cfg)
    scheduler = make_lr_scheduler(optimizer, cfg, steps)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    losses = []
    for _ in range(steps):
        gen = torch.Generator().manual_seed(NOISE_SEED)  # the same noise and timesteps every step
        share = forward_backward(
            mb.family, mb.denoiser, mb.objective, mb.latents, mb.cond, mb.info, cfg, gen, 2, scaler
        )  # []
        losses.append(float(share))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
    return MiniRun(losses, mb.denoiser, mb.params, optimizer)
