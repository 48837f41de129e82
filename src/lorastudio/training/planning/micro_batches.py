"""One sampler batch's forward + backward in micro-batches (the plan's micro_batch_size).

Each sampler batch is split into chunks of that many samples for forward/backward, with the same
maths as the unsplit batch: the latents, noise and timesteps are drawn for the whole batch first
(the same draws), each chunk takes its slice, and every chunk's loss share already divides by the
step's sample count. Used by the step loop (training/optimize.py) and the memory plan's
measured trials (training/planning/plan_measure.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.training.distributed import BatchShard, ParallelContext, gradient_sync

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.families.base import Family
    from lorastudio.training.inputs.latents import LatentBatch
    from lorastudio.training.noise import DdpmObjective, FlowObjective


def micro_batch_shards(size: int, micro_batch_size: int, ctx: ParallelContext) -> list[BatchShard | None]:
    """The slices of a batch of `size` samples that the forward/backward passes take: one per
    micro-batch of `micro_batch_size` (the last may be smaller), each narrowed to this rank's
    part in a data-parallel run. [None] for one unsplit pass of a single process."""
    if micro_batch_size >= size and not ctx.distributed:
        return [None]
    shards: list[BatchShard | None] = []
    for start in range(0, size, micro_batch_size):
        stop = min(start + micro_batch_size, size)
        if ctx.distributed:
            mine = ctx.shard(stop - start)  # this rank's slice of the micro-batch
            shards.append(BatchShard(start + mine.start, start + mine.stop, size, mine.grad_factor))
        else:
            shards.append(BatchShard(start, stop, size, 1.0))
    return shards


def batch_forward_backward(
    family: Family,
    denoiser: Any,
    objective: DdpmObjective | FlowObjective,
    batch: LatentBatch,
    cond: dict[str, Any],
    cfg: TrainConfig,
    generator: torch.Generator,
    step_samples: int,
    scaler: torch.amp.GradScaler,
    micro_batch_size: int,
    *,
    ctx: ParallelContext,
    ddp: Any = None,
    sync: bool = True,
    loss_weights: torch.Tensor | None = None,
    preserve: tuple[dict[str, Any], float] | None = None,
    prior: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Forward + backward of one sampler batch in micro-batches of `micro_batch_size` samples,
    with the maths of the unsplit batch (see the module docstring). Takes the batch's latents
    [B, C, h, w] (training dtype, on the device) and collated conditioning; `ddp` the DDP wrapper
    (None: single process); `sync`: let DDP all-reduce in the batch's last backward;
    `loss_weights` [B] fp32 (the samples' dataset entries' loss_weight, data/mix.py), multiplied
    into the objective's per-sample weights (None: all 1, nothing multiplied); `preserve`: the
    batch's class conditioning and weight (training/preservation.py), whose pass follows each
    micro-batch's on the same draws; `prior` [B] bool: the samples whose target is the base
    model's prediction (a regularisation entry's prior_prediction: preservation.prior_targets).
    Returns one 0-d device tensor per pass: its share of the step loss (no host sync)."""
    from lorastudio.training.preservation import preservation_pass, prior_targets
    from lorastudio.training.step import forward_backward

    info = {
        "original_size": batch.original_size,
        "crop_top_left": batch.crop_top_left,
        "target_size": batch.target_size,
    }
    if batch.controls is not None:  # paired samples: the family reads them in predict
        info["controls"] = batch.controls  # [B, N, C, h, w]
    if batch.mask is not None:  # masked images: the loss weights their pixels (training/step.py)
        info["loss_mask"] = batch.mask  # [B, 1, h, w]
    shards = micro_batch_shards(batch.latents.shape[0], micro_batch_size, ctx)
    drawn = None
    if len(shards) > 1 or loss_weights is not None or preserve is not None or prior is not None:
        drawn = objective.noise(batch.latents, generator)  # the whole batch's, the draws of an unsplit one
    if loss_weights is not None and drawn is not None:
        weight = drawn.weight * loss_weights.to(drawn.weight.device)  # [B]
        drawn = dataclasses.replace(drawn, weight=weight)  # loss_c (Huber) kept
    if prior is not None and drawn is not None:
        drawn = prior_targets(family, denoiser, drawn, cond, info, cfg, prior)
    shares = []
    for i, shard in enumerate(shards):
        with gradient_sync(ddp, sync=sync and i == len(shards) - 1):
            share = forward_backward(
                family, denoiser, objective, batch.latents, cond, info, cfg, generator, step_samples,
                scaler, shard=shard, forward_module=ddp, noised=drawn,
            )  # fmt: skip
            shares.append(share)  # [] on the device
            if preserve is not None:  # the same noisy latents and timesteps, the class captions
                shares.append(
                    preservation_pass(
                        family,
                        denoiser,
                        drawn,
                        preserve[0],
                        info,
                        cfg,
                        preserve[1],
                        step_samples,
                        scaler,
                        shard,
                    )  # type: ignore[arg-type]
                )
    return shares


def entry_loss_weights(scan: DatasetScan, indices: list[int]) -> torch.Tensor | None:
    """[B] fp32: the loss_weight of each sample's dataset entry; None when every entry's is 1."""
    entries = scan.entries
    if all(e.loss_weight == 1.0 for e in entries):
        return None
    return torch.tensor([entries[scan.items[i].entry].loss_weight for i in indices], dtype=torch.float32)
