"""Differential output preservation in the training step (TrainConfig.preservation; what it is
and why: config_preservation.py). Phase 1 encodes the class-word captions (or the preservation
prompts: data/preservation_texts.py) beside the captions; every micro-batch then runs
`preservation_pass` after its usual forward + backward, on the same noisy latents and timesteps:

  base   = denoiser(noisy, t, class captions) with the adapter disabled, no gradient  (the target)
  pred   = denoiser(noisy, t, class captions) with the adapter                        (trained)
  loss  += weight * MSE(pred, base), averaged like the step's loss (its share per sample)

`prior_targets` (a regularisation entry's prior_prediction, OneTrainer's prior prediction)
uses the same base prediction as the loss target of those samples, on their own captions.

Neither draws from any random stream, so a resumed run stays exact. The adapter is disabled
through peft's per-layer flag (`adapters_off`): every adapted layer then returns its base
layer's output, the fused projections' shared LoRA forward included (training/
fused_projections.py reads the same flag); compiled blocks guard on the flag (a second graph per
block for the disabled variant); CUDA graphs stay off (the second backward per micro-batch is
the accumulation case they get wrong: training/speed/compile.py compile_request), and the base
prediction is cloned anyway. The loss kind is always MSE (the
base prediction is a target of the model's own scale: no timestep weighting, no mask, no
dataset loss weight), as ai-toolkit's and OneTrainer's. Hand-written: no library has this step.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.training.speed.compile import run_compiled
from lorastudio.training.step import weighted_loss_share

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.data.preservation_texts import PreservationTexts
    from lorastudio.families.base import Family
    from lorastudio.training.distributed import BatchShard
    from lorastudio.training.noise import NoisedBatch


def preservation_cond(
    texts: PreservationTexts | None,
    family: Family,
    conds: Mapping[str, Any],
    captions: Sequence[str],
    indices: Sequence[int],
) -> tuple[dict[str, Any], float] | None:
    """The collated conditioning of a batch's preserved texts and the loss weight (None without
    preservation). `captions`: what the sampler picked for the dataset items `indices`."""
    if texts is None:
        return None
    keys = [texts.text(c, i) for c, i in zip(captions, indices, strict=True)]
    return family.collate_conditioning([conds[k] for k in keys]), texts.weight


_LAYERS: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


@contextmanager
def adapters_off(denoiser: Any) -> Iterator[None]:
    """The denoiser's adapter disabled inside (every adapted layer gives its base output); for
    no-grad use only.

    peft's flag on each adapted layer (BaseTunerLayer._disable_adapters, which its forward and
    training/speed/fused_projections.py read) is flipped on the denoiser's layers (found once, cached).
    Not diffusers' disable_adapters / enable_adapters: 7.3 ms per pair on the tiny FLUX.1 (a
    package version check and a walk of every module, per micro-batch); not peft's per-layer
    enable_adapters: it also resets requires_grad on every adapter weight (44 us per layer, ~18 ms
    for FLUX.1's ~400 layers), which a no-grad pass does not need. The flag alone: 9 us per layer."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = _LAYERS.get(denoiser)
    if layers is None:
        layers = _LAYERS[denoiser] = [m for m in denoiser.modules() if isinstance(m, BaseTunerLayer)]
    was = [layer.disable_adapters for layer in layers]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer, flag in zip(layers, was, strict=True):
            layer._disable_adapters = flag


def base_prediction(
    family: Family,
    denoiser: Any,
    noisy: torch.Tensor,
    noise_level: torch.Tensor,
    cond: dict[str, Any],
    info: Mapping[str, Any],
    cfg: TrainConfig,
) -> torch.Tensor:
    """The base model's prediction [B,C,h,w] (the adapter disabled, no gradient), a tensor of its own."""
    with torch.no_grad(), adapters_off(denoiser):
        return family.predict(denoiser, noisy, noise_level, cond, info, cfg).clone()  # [B, C, h, w]


def prior_mask(scan: DatasetScan, indices: Sequence[int]) -> torch.Tensor | None:
    """[B] bool: which of the dataset items `indices` come from an entry with prior_prediction
    (None when none does)."""
    entries = scan.entries
    marked = [bool(entries and entries[scan.items[i].entry].prior_prediction) for i in indices]
    return torch.tensor(marked) if any(marked) else None


def prior_targets(
    family: Family,
    denoiser: Any,
    noised: NoisedBatch,
    cond: dict[str, Any],
    batch_info: Mapping[str, Any],
    cfg: TrainConfig,
    prior: torch.Tensor,
) -> NoisedBatch:
    """`noised` with the target of the samples marked in `prior` [B] bool replaced by the base
    model's prediction on their own noisy latents and captions (the adapter disabled, no
    gradient: OneTrainer's prior prediction for a regularisation entry's class images). One
    no-grad forward of the whole batch; the other samples keep their noise target."""
    info = {k: v for k, v in batch_info.items() if k != "loss_mask"}

    def run() -> torch.Tensor:
        return base_prediction(family, denoiser, noised.noisy, noised.noise_level, cond, info, cfg)

    base = run_compiled(denoiser, run).float()  # [B, C, h, w]
    keep = prior.to(base.device)[:, None, None, None]  # [B, 1, 1, 1]
    return dataclasses.replace(noised, target=torch.where(keep, base, noised.target))  # [B, C, h, w]


def preservation_pass(
    family: Family,
    denoiser: Any,
    noised: NoisedBatch,
    cond: dict[str, Any],
    batch_info: Mapping[str, Any],
    cfg: TrainConfig,
    weight: float,
    step_samples: int,
    scaler: torch.amp.GradScaler,
    shard: BatchShard | None = None,
) -> torch.Tensor:
    """The preservation term of one micro-batch (see the module docstring): the base prediction
    on the class conditioning `cond`, then the adapter's on the same inputs, and the backward of
    weight x MSE over the step's `step_samples`. `noised` / `cond` / `batch_info` are the whole
    sampler batch's (`shard` selects the micro-batch, as in training/step.py).
    Returns its share of the step loss, a detached 0-d fp32 device tensor."""
    info = {k: v for k, v in batch_info.items() if k != "loss_mask"}  # the whole image is preserved
    if shard is not None:
        noised, cond, info = shard.take(noised, cond, info)

    def run() -> torch.Tensor:
        target = base_prediction(family, denoiser, noised.noisy, noised.noise_level, cond, info, cfg).float()
        pred = family.predict(denoiser, noised.noisy, noised.noise_level, cond, info, cfg)  # [B, C, h, w]
        weights = torch.full((pred.shape[0],), weight, dtype=torch.float32, device=pred.device)  # [B]
        share = weighted_loss_share(pred, target, weights, step_samples, "mse")  # []
        scaler.scale(share).backward()
        return share.detach()

    return run_compiled(denoiser, run)
