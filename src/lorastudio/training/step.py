"""The per-micro-batch training computation shared by the loop and the GPU benchmark.

`forward_backward` = objective noise -> family.predict -> weighted loss (TrainConfig.loss, see
training/losses.py; a masked image's pixels weighted by its loss mask: batch_info["loss_mask"])
-> (scaled) backward, with
the regional-compile fallback around the denoiser call. It never reads a value back to the host:
it returns the micro-batch's loss share as a 0-d device tensor, so a caller can accumulate
shares on the device and synchronise once per optimizer step (or per logging interval).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.training.losses import elementwise_loss, per_sample_loss
from lorastudio.training.speed.compile import run_compiled

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family
    from lorastudio.training.distributed import BatchShard
    from lorastudio.training.noise import DdpmObjective, FlowObjective, NoisedBatch


def weighted_loss_share(
    pred: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    step_samples: int,
    kind: str = "mse",
    loss_c: torch.Tensor | None = None,
    pixel_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum over the micro-batch of the per-sample loss `kind` (fp32; training/losses.py) times
    its weight, divided by the samples of the whole optimizer step: pred [B,C,h,w] (any float
    dtype), target [B,C,h,w] fp32, weight [B] fp32, loss_c [B] the Huber thresholds (huber /
    smooth_l1) -> [] fp32. Summing the shares of a step's micro-batches gives its mean loss.
    `pixel_weight` [B,1,h,w] fp32 (a masked loss, `mask_weights`) weights each latent pixel's
    loss before the mean over all of them (a pixel of weight 0 teaches nothing)."""
    if pixel_weight is None:
        per_sample = per_sample_loss(kind, pred, target, loss_c)  # [B]
    else:
        elements = elementwise_loss(kind, pred.float() - target, loss_c)  # [B, C, h, w]
        per_sample = (elements * pixel_weight).flatten(1).mean(dim=1)  # [B]
    per_sample = per_sample * weight  # [B]
    return per_sample.sum() / step_samples  # []


def mask_weights(mask: torch.Tensor | None, unmasked_weight: float) -> torch.Tensor | None:
    """Per-pixel loss weights of a loss mask [B,1,h,w] in [0, 1] (data/masks.py): 1 inside the
    mask, `unmasked_weight` outside, linear in between; None without a mask."""
    if mask is None:
        return None
    return unmasked_weight + (1.0 - unmasked_weight) * mask.float()  # [B, 1, h, w]


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
    *,
    shard: BatchShard | None = None,
    forward_module: Any = None,
    noised: NoisedBatch | None = None,
) -> torch.Tensor:
    """Forward + backward of one micro-batch; gradients accumulate into the LoRA parameters,
    scaled so the optimizer step sees the mean over all `step_samples` samples of the step.

    Data-parallel (training/distributed.py): `latents`, `cond` and `batch_info` are the GLOBAL
    micro-batch; the noise and timesteps are drawn for all of it (the same draws as one process),
    then `shard` keeps this rank's slice, the forward goes through `forward_module` (the DDP
    wrapper of `denoiser`), and the backward is scaled by shard.grad_factor so DDP's average is
    the gradient of the global mean. The returned share is this rank's part of the step loss.

    Takes: latents [B,C,h,w] in the training dtype on the training device, the collated
    conditioning, batch_info (see Family.predict; plus "loss_mask" [B,1,h,w] for masked images,
    taken out before the family sees it), the CPU generator for noise and timesteps, and
    `noised`: draws already made for these latents (a batch split into micro-batches draws once
    for the whole batch; `shard` then selects the micro-batch) — None draws them here.
    Returns: this micro-batch's share of the step loss, a detached 0-d fp32 tensor on the device
    (no host synchronisation). Raises: whatever the model raises (compiler failures excepted:
    the step then reruns eagerly, see training.speed.compile.run_compiled).
    """
    if noised is None:
        noised = objective.noise(latents, generator)  # every sample of the micro-batch
    if shard is not None:
        noised, cond, batch_info = shard.take(noised, cond, dict(batch_info))  # this rank's slice
    module = denoiser if forward_module is None else forward_module
    pixel_weight = mask_weights(batch_info.get("loss_mask"), cfg.unmasked_weight)  # [B, 1, h, w] | None
    info = {k: v for k, v in batch_info.items() if k != "loss_mask"}  # what the family reads

    def run() -> torch.Tensor:
        pred = family.predict(module, noised.noisy, noised.noise_level, cond, info, cfg)  # [B,C,h,w]
        share = weighted_loss_share(
            pred, noised.target, noised.weight, step_samples, cfg.loss, noised.loss_c, pixel_weight
        )  # []
        scaled = share if shard is None else share * shard.grad_factor  # DDP averages over ranks
        scaler.scale(scaled).backward()
        return share.detach()

    return run_compiled(denoiser, run)
