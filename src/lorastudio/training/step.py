"""The per-micro-batch training computation shared by the loop and the GPU benchmark.

`forward_backward` = objective noise -> family.predict -> weighted MSE -> (scaled) backward, with
the regional-compile fallback around the denoiser call. It never reads a value back to the host:
it returns the micro-batch's loss share as a 0-d device tensor, so a caller can accumulate
shares on the device and synchronise once per optimizer step (or per logging interval).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.training.compile import run_compiled

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family
    from lorastudio.training.noise import DdpmObjective, FlowObjective


def weighted_mse_share(
    pred: torch.Tensor, target: torch.Tensor, weight: torch.Tensor, step_samples: int
) -> torch.Tensor:
    """Sum over the micro-batch of the per-sample MSE (fp32) times its weight, divided by the
    samples of the whole optimizer step: pred [B,C,h,w] (any float dtype), target [B,C,h,w] fp32,
    weight [B] fp32 -> [] fp32. Summing the shares of a step's micro-batches gives its mean loss."""
    per_sample = ((pred.float() - target) ** 2).mean(dim=(1, 2, 3)) * weight  # [B]
    return per_sample.sum() / step_samples  # []


def forward_backward(
    family: Family,
    denoiser: Any,
    objective: DdpmObjective | FlowObjective,
    latents: torch.Tensor,
    cond: dict[str, Any],
    batch_info: Mapping[str, Any],
    cfg: TrainConfig,
    generator: torch.Generator,
    step_samples: int,
    scaler: torch.amp.GradScaler,
) -> torch.Tensor:
    """Forward + backward of one micro-batch; gradients accumulate into the LoRA parameters,
    scaled so the optimizer step sees the mean over all `step_samples` samples of the step.

    Takes: latents [B,C,h,w] in the training dtype on the training device, the collated
    conditioning, batch_info (see Family.predict), the CPU generator for noise and timesteps.
    Returns: this micro-batch's share of the step loss, a detached 0-d fp32 tensor on the device
    (no host synchronisation). Raises: whatever the model raises (compiler failures excepted:
    the step then reruns eagerly, see training.compile.run_compiled).
    """
    noised = objective.noise(latents, generator)

    def run() -> torch.Tensor:
        pred = family.predict(denoiser, noised.noisy, noised.noise_level, cond, batch_info, cfg)  # [B,C,h,w]
        share = weighted_mse_share(pred, noised.target, noised.weight, step_samples)  # []
        scaler.scale(share).backward()
        return share.detach()

    return run_compiled(denoiser, run)
