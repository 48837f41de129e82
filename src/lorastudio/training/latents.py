"""Phase 2: latents. The VAE posterior (mean, std, fp32) of `cache_variants` crop/flip variants
per image is cached in RAM, and each step draws mean + std * randn in fp32, then casts to the
training dtype. A data-parallel run encodes each image on one rank and all-gathers the cache. When the cache would exceed cfg.latent_cache_max_gb, images are cropped and
encoded every step instead (the VAE stays loaded): same distribution, more compute.

Both sources answer `sample(indices, generator, dtype, device) -> LatentBatch`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lorastudio.training.distributed import gather_round, group_context, round_robin
from lorastudio.training.events import Emit, Preparing

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import CroppedImage, ImageItem
    from lorastudio.families.base import Family


# per variant ((height, width) of the source, (top, left) of the crop), and the crop's (H, W)
CropInfo = tuple[list[tuple[tuple[int, int], tuple[int, int]]], tuple[int, ...]]


@dataclass(frozen=True)
class LatentBatch:
    latents: torch.Tensor  # [B, C, h, w] training dtype, on the training device
    original_size: list[tuple[int, int]]  # per sample (height, width) of the source image
    crop_top_left: list[tuple[int, int]]  # per sample (top, left) of the crop
    target_size: tuple[int, int]  # (H, W) pixels of the bucket


def cache_bytes(buckets: Sequence[tuple[int, int]], variants: int, channels: int, scale: int) -> int:
    """RAM the cache would take: mean + std, fp32, `variants` per image of bucket (w, h)."""
    cells = sum((w // scale) * (h // scale) for w, h in buckets)
    return cells * channels * variants * 2 * 4


def variant_flips(variants: int, random_flip: bool, rng: np.random.Generator) -> list[bool]:
    """Flip flags of an image's cached variants: alternating (half flipped) when there are
    several, a coin toss for a single variant, none without random_flip."""
    if not random_flip:
        return [False] * variants
    if variants == 1:
        return [bool(rng.random() < 0.5)]
    return [v % 2 == 1 for v in range(variants)]


def _draw(mean: torch.Tensor, std: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """mean + std * randn, fp32; the noise comes from the CPU generator."""
    noise = torch.randn(mean.shape, generator=generator).to(mean.device)  # [B, C, h, w]
    return mean + std * noise


class CachedLatents:
    """Posterior (mean, std) per image and variant, fp32 on the CPU."""

    def __init__(self) -> None:
        self.means: list[torch.Tensor] = []  # per image [K, C, h, w]
        self.stds: list[torch.Tensor] = []  # per image [K, C, h, w]
        self.crops: list[list[tuple[tuple[int, int], tuple[int, int]]]] = []  # per image, per variant
        self.sizes: list[tuple[int, int]] = []  # per image (H, W) pixels

    def add(self, mean: torch.Tensor, std: torch.Tensor, crops: Sequence[CroppedImage]) -> None:
        """Store one image's K variants: mean/std [K, C, h, w] and the K crops they came from."""
        self.add_encoded(mean, std, crops_info(crops))

    def add_encoded(self, mean: torch.Tensor, std: torch.Tensor, info: CropInfo) -> None:
        """Store one image's K variants: mean/std [K, C, h, w] and its `crops_info`."""
        self.means.append(mean.detach().float().cpu())
        self.stds.append(std.detach().float().cpu())
        self.crops.append(list(info[0]))
        self.sizes.append((int(info[1][0]), int(info[1][1])))

    def sample(
        self, indices: Sequence[int], generator: torch.Generator, dtype: torch.dtype, device: torch.device
    ) -> LatentBatch:
        """One latent per index from a uniformly chosen cached variant."""
        picks = [int(torch.randint(len(self.crops[i]), (1,), generator=generator)) for i in indices]
        mean = torch.stack([self.means[i][k] for i, k in zip(indices, picks, strict=True)])  # [B, C, h, w]
        std = torch.stack([self.stds[i][k] for i, k in zip(indices, picks, strict=True)])  # [B, C, h, w]
        latents = _draw(mean, std, generator).to(device=device, dtype=dtype)  # [B, C, h, w]
        crops = [self.crops[i][k] for i, k in zip(indices, picks, strict=True)]
        return LatentBatch(latents, [c[0] for c in crops], [c[1] for c in crops], self.sizes[indices[0]])


def build_latent_cache(
    family: Family,
    vae: Any,
    items: Sequence[ImageItem],
    cfg: TrainConfig,
    rng: np.random.Generator,
    *,
    device: torch.device,
    emit: Emit,
    check_stop: Callable[[], None],
) -> CachedLatents:
    """Encode cfg.cache_variants crop/flip variants of every image. Calls `check_stop()` before
    each image (each round of a data-parallel run) and emits Preparing("latents", done, total)
    as it goes.

    In a data-parallel run (an initialised process group) the images are shared out round-robin:
    every rank walks every image's random draws (flips, crop positions: `rng` ends in the same
    state on every rank, as after one process), but only decodes and encodes its own image of
    each round; the round's posteriors are all-gathered, so every rank holds the cache one
    process builds (the same tensors: each image is encoded alone, as one process does)."""
    from lorastudio.data import load_crop

    ctx = group_context()
    cache = CachedLatents()
    total = len(items)
    every = max(1, total // 100)
    for members, mine in round_robin(total, ctx):
        check_stop()
        encoded = None
        for n in members:
            flips = variant_flips(int(cfg.cache_variants), cfg.random_flip, rng)
            if n != mine:
                for _ in flips:
                    replay_crop_draws(items[n], cfg.random_crop, rng)
                continue
            crops = [load_crop(items[n], random_crop=cfg.random_crop, flip=f, rng=rng) for f in flips]
            pixels = torch.from_numpy(np.stack([c.pixels for c in crops])).to(device)  # [K, 3, H, W]
            with torch.no_grad():
                mean, std = family.encode_pixels(vae, pixels)  # [K, C, h, w] each, fp32
            encoded = (mean.detach().float().cpu(), std.detach().float().cpu(), crops_info(crops))
        for result in gather_round(encoded, ctx)[: len(members)]:
            cache.add_encoded(*result)
        done = members[-1] + 1
        if done % every < len(members) or done == total:
            emit(Preparing(phase="latents", done=done, total=total))
    return cache


def replay_crop_draws(item: ImageItem, random_crop: bool, rng: np.random.Generator) -> None:
    """Advance `rng` exactly as `data.load_crop(item, random_crop=..., rng=rng)` does, without
    decoding the image (the same `crop_offset` draws, the offset discarded)."""
    from lorastudio.data.crop import crop_offset, resized_size

    resized = resized_size(item.width, item.height, item.bucket)
    crop_offset(resized, item.bucket, random_crop=random_crop, rng=rng)


def crops_info(crops: Sequence[CroppedImage]) -> CropInfo:
    """What the cache keeps of an image's K crops: (original_size, crop_top_left) per variant,
    and the crop's (H, W) pixels."""
    return [(c.original_size, c.crop_top_left) for c in crops], tuple(crops[0].pixels.shape[1:])


class EncodedPerStep:
    """Crops and encodes the batch's images every step (the cache would not fit in RAM)."""

    def __init__(
        self, family: Family, vae: Any, items: Sequence[ImageItem], cfg: TrainConfig, rng: np.random.Generator
    ):
        self.family = family
        self.vae = vae
        self.items = list(items)
        self.random_crop = cfg.random_crop
        self.random_flip = cfg.random_flip
        self.rng = rng

    def sample(
        self, indices: Sequence[int], generator: torch.Generator, dtype: torch.dtype, device: torch.device
    ) -> LatentBatch:
        """Fresh crop (and coin-toss flip) of each image, encoded now, one posterior draw each."""
        from lorastudio.data import load_crop

        crops = [
            load_crop(
                self.items[i],
                random_crop=self.random_crop,
                flip=self.random_flip and bool(self.rng.random() < 0.5),
                rng=self.rng,
            )
            for i in indices
        ]
        pixels = torch.from_numpy(np.stack([c.pixels for c in crops])).to(device)  # [B, 3, H, W]
        with torch.no_grad():
            mean, std = self.family.encode_pixels(self.vae, pixels)  # [B, C, h, w] each, fp32
        latents = _draw(mean.float(), std.float(), generator).to(dtype=dtype)  # [B, C, h, w]
        return LatentBatch(
            latents,
            [c.original_size for c in crops],
            [c.crop_top_left for c in crops],
            (int(pixels.shape[2]), int(pixels.shape[3])),
        )


LatentSource = CachedLatents | EncodedPerStep
