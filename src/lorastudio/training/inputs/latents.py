"""Phase 2: latents. The VAE posterior (mean, std, fp32) of `cache_variants` crop/flip variants
per image is cached in RAM, and each step draws mean + std * randn in fp32, then casts to the
training dtype (a posterior sample for every family, as diffusers' FLUX.1 / Qwen-Image / Krea 2 /
SDXL DreamBooth scripts take; their FLUX.2 and Z-Image scripts take the mean, `mode()`: a
deliberate choice here, one rule for all, the mean's difference being the VAE's small std;
session 28 maths audit). A data-parallel run encodes each image on one rank and all-gathers the cache. When the cache would exceed cfg.latent_cache_max_gb, images are cropped and
encoded every step instead (the VAE stays loaded): same distribution, more compute.

Paired datasets (data/pairs.py): each crop variant's control images are cropped like the target
(same bucket, crop and flip) or, where the run sizes controls on their own (ImageItem.control_sizes:
TrainConfig.control_resolution, data/control_sizing.py), resized whole to their size (flipped with
the target), encoded with `family.encode_controls` (the posterior mean: controls are not noised)
and cached beside it; a batch hands them on as LatentBatch.controls: [B, K, C, h, w] when every
slot has one size, else a tuple of K [B, C, h_k, w_k] (the samples of a batch share their
control sizes: DatasetScan.batch_keys).

Masked images (data/masks.py): each variant's loss mask, cut like its crop and box-averaged to the
latent grid, is kept beside it (LatentBatch.mask).

Both sources answer `sample(indices, generator, dtype, device) -> LatentBatch`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lorastudio.data.control_sizing import rule_area
from lorastudio.data.latent_keys import cache_bytes as cache_bytes  # the run sizes its cache with it
from lorastudio.data.latent_keys import variant_flips
from lorastudio.training.distributed import gather_round, group_context, round_robin
from lorastudio.training.events import Emit, Preparing

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import CroppedImage, ImageItem
    from lorastudio.families.base import Family


# a batch's control latents: [B, K, C, h, w], or K slots [B, C, h_k, w_k] of their own sizes
Controls = torch.Tensor | tuple[torch.Tensor, ...]
# one image's cached control latents: [V, K, C, h, w], or K slots [V, C, h_k, w_k]
ItemControls = torch.Tensor | tuple[torch.Tensor, ...]

# per variant ((height, width) of the source, (top, left) of the crop), and the crop's (H, W)
CropInfo = tuple[list[tuple[tuple[int, int], tuple[int, int]]], tuple[int, ...]]


@dataclass(frozen=True)
class LatentBatch:
    latents: torch.Tensor  # [B, C, h, w] training dtype, on the training device
    original_size: list[tuple[int, int]]  # per sample (height, width) of the source image
    crop_top_left: list[tuple[int, int]]  # per sample (top, left) of the crop
    target_size: tuple[int, int]  # (H, W) pixels of the bucket
    controls: Controls | None = None  # control latents of a paired batch (see the module docstring)
    mask: torch.Tensor | None = None  # [B, 1, h, w] fp32 loss mask in [0, 1] (data/masks.py), else None


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
        self.controls: list[ItemControls | None] = []  # per image (see ItemControls) or None
        self.masks: list[torch.Tensor | None] = []  # per image [K_variants, h, w] fp32 or None

    def add(self, mean: torch.Tensor, std: torch.Tensor, crops: Sequence[CroppedImage]) -> None:
        """Store one image's K variants: mean/std [K, C, h, w] and the K crops they came from."""
        self.add_encoded(mean, std, crops_info(crops))

    def add_encoded(
        self,
        mean: torch.Tensor,
        std: torch.Tensor,
        info: CropInfo,
        controls: ItemControls | None = None,
        masks: torch.Tensor | None = None,
    ) -> None:
        """Store one image's K variants: mean/std [K, C, h, w], its `crops_info`, for a paired
        sample its control latents [K, N, C, h, w] (N controls per variant; or N slots
        [K, C, h_n, w_n] of their own sizes), and for a masked image its loss masks [K, h, w]
        (data/masks.py)."""
        self.controls.append(None if controls is None else _to_cpu(controls))
        self.masks.append(masks)
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
        controls = None
        if self.controls[indices[0]] is not None:
            picked = [variant_controls(self.controls[i], k) for i, k in zip(indices, picks, strict=True)]
            controls = stack_controls(picked, device, dtype)
        picked_masks = [
            self.masks[i] if self.masks[i] is None else self.masks[i][k]
            for i, k in zip(indices, picks, strict=True)
        ]
        mask = batch_mask(picked_masks, latents)
        return LatentBatch(
            latents, [c[0] for c in crops], [c[1] for c in crops], self.sizes[indices[0]], controls, mask
        )


def _to_cpu(controls: ItemControls) -> ItemControls:
    """Cached control latents detached, fp32, on the CPU (either layout)."""
    if isinstance(controls, torch.Tensor):
        return controls.detach().float().cpu()
    return tuple(c.detach().float().cpu() for c in controls)


def variant_controls(controls: ItemControls, k: int) -> ItemControls:
    """Variant k of an image's cached controls: [N, C, h, w], or N slots [C, h_n, w_n]."""
    return controls[k] if isinstance(controls, torch.Tensor) else tuple(c[k] for c in controls)


def stack_controls(picked: Sequence[ItemControls], device: torch.device, dtype: torch.dtype) -> Controls:
    """A batch's controls from each sample's ([N, C, h, w], or N slots [C, h_n, w_n] of the same
    sizes in every sample of a batch): [B, N, C, h, w], or a tuple of N [B, C, h_n, w_n] where the
    slots' sizes differ (a tensor when they are all equal, as one stack holds them)."""
    if isinstance(picked[0], torch.Tensor):
        return torch.stack(list(picked)).to(device=device, dtype=dtype)  # [B, N, C, h, w]
    slots = tuple(
        torch.stack([sample[n] for sample in picked]).to(device=device, dtype=dtype)  # [B, C, h_n, w_n]
        for n in range(len(picked[0]))
    )
    if len({s.shape for s in slots}) == 1:
        return torch.stack(slots, dim=1)  # [B, N, C, h, w]
    return slots


def crop_masks(
    item: ImageItem, crops: Sequence[CroppedImage], flips: Sequence[bool], scale: int
) -> torch.Tensor | None:
    """The loss masks of an item's crops on the latent grid (data.masks.mask_crop: cut like each
    crop): [V, h, w] fp32 on the CPU, or None for an item without a mask."""
    if item.mask is None:
        return None
    from lorastudio.data.masks import mask_crop

    arrays = [mask_crop(item, c.crop_top_left, f, scale) for c, f in zip(crops, flips, strict=True)]
    return torch.from_numpy(np.stack(arrays))  # [V, h, w]


def batch_mask(masks: Sequence[torch.Tensor | None], latents: torch.Tensor) -> torch.Tensor | None:
    """A batch's loss mask [B, 1, h, w] fp32 on the latents' device from each sample's [h, w]
    (None: an unmasked sample, all ones), or None when no sample of the batch is masked."""
    if all(m is None for m in masks):
        return None
    h, w = latents.shape[2:]
    full = [torch.ones(h, w) if m is None else m for m in masks]
    return torch.stack(full).unsqueeze(1).to(latents.device)  # [B, 1, h, w]


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
    area = rule_area(cfg.control_resolution)
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
                controls = encode_controls(
                    family, vae, items[n], crops, flips, device, area
                )  # [K, N, C, h, w]
            masks = crop_masks(items[n], crops, flips, family.spec.vae_scale_factor)  # [K, h, w] | None
            encoded = (
                mean.detach().float().cpu(),
                std.detach().float().cpu(),
                crops_info(crops),
                controls,
                masks,
            )
        for result in gather_round(encoded, ctx)[: len(members)]:
            cache.add_encoded(*result)
        done = members[-1] + 1
        if done % every < len(members) or done == total:
            emit(Preparing(phase="latents", done=done, total=total))
    return cache


def encode_controls(
    family: Family,
    vae: Any,
    item: ImageItem,
    crops: Sequence[CroppedImage],
    flips: Sequence[bool],
    device: torch.device,
    area: int | None = None,
) -> ItemControls | None:
    """The control latents of a paired item's crops: each control cropped like its target crop
    (data.pairs.load_control_crop: same bucket, crop and flip) and encoded with
    family.encode_controls. Returns [V, N, C, h, w] fp32 on the CPU (V crops, N controls), or
    None for an item without controls; where the item's controls have sizes of their own
    (ImageItem.control_sizes) each is resized whole to it (flipped with its crop): a tuple of N
    slots [V, C, h_n, w_n] (`area`: the int control_resolution's, data.control_sizing.rule_area;
    None: the pipeline's). Draws nothing from any rng."""
    if not item.controls:
        return None
    if item.control_sizes:
        return _encode_sized_controls(family, vae, item, flips, device, area)
    from lorastudio.data.crop import resized_size
    from lorastudio.data.pairs import control_folder_ids, load_control_crop

    resized = resized_size(item.width, item.height, item.bucket)
    pixels = np.stack(
        [
            load_control_crop(path, item.bucket, crop.crop_top_left, resized, flip, fid)
            for crop, flip in zip(crops, flips, strict=True)
            for path, fid in zip(item.controls, control_folder_ids(item), strict=True)
        ]
    )  # [V*N, 3, H, W]
    latents = family.encode_controls(vae, torch.from_numpy(pixels).to(device))  # [V*N, C, h, w]
    v, n = len(crops), len(item.controls)
    return latents.detach().float().cpu().reshape(v, n, *latents.shape[1:])  # [V, N, C, h, w]


def _encode_sized_controls(
    family: Family,
    vae: Any,
    item: ImageItem,
    flips: Sequence[bool],
    device: torch.device,
    area: int | None,
) -> tuple[torch.Tensor, ...]:
    """encode_controls for controls of their own sizes: per slot [V, C, h_n, w_n] fp32, CPU."""
    from lorastudio.data.control_sizing import load_control_sized
    from lorastudio.data.pairs import control_folder_ids

    sizing = family.spec.control_sizing
    if sizing is None:
        raise ValueError(f"{family.spec.name} has no control sizing rule")
    slots = []
    for path, fid, size in zip(item.controls, control_folder_ids(item), item.control_sizes, strict=True):
        unflipped = load_control_sized(path, size, sizing, flip=False, folder_id=fid, area=area)  # [3, H, W]
        pixels = np.stack([unflipped[:, :, ::-1] if flip else unflipped for flip in flips])  # [V, 3, H, W]
        latents = family.encode_controls(vae, torch.from_numpy(np.ascontiguousarray(pixels)).to(device))
        slots.append(latents.detach().float().cpu())  # [V, C, h_n, w_n]
    return tuple(slots)


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
        self.area = rule_area(cfg.control_resolution)  # the int control_resolution's, else None

    def sample(
        self, indices: Sequence[int], generator: torch.Generator, dtype: torch.dtype, device: torch.device
    ) -> LatentBatch:
        """Fresh crop (and coin-toss flip) of each image, encoded now, one posterior draw each."""
        from lorastudio.data import load_crop

        flips = [self.random_flip and bool(self.rng.random() < 0.5) for _ in indices]
        crops = [
            load_crop(self.items[i], random_crop=self.random_crop, flip=flip, rng=self.rng)
            for i, flip in zip(indices, flips, strict=True)
        ]
        pixels = torch.from_numpy(np.stack([c.pixels for c in crops])).to(device)  # [B, 3, H, W]
        controls = None
        with torch.no_grad():
            mean, std = self.family.encode_pixels(self.vae, pixels)  # [B, C, h, w] each, fp32
            if self.items[indices[0]].controls:
                per_item = [
                    encode_controls(self.family, self.vae, self.items[i], [crop], [flip], device, self.area)
                    for i, crop, flip in zip(indices, crops, flips, strict=True)
                ]  # [1, N, C, h, w] (or N slots [1, C, h_n, w_n]) each
                controls = stack_controls(
                    [variant_controls(c, 0) for c in per_item if c is not None], device, dtype
                )
        latents = _draw(mean.float(), std.float(), generator).to(dtype=dtype)  # [B, C, h, w]
        scale = self.family.spec.vae_scale_factor
        masks = [
            crop_masks(self.items[i], [c], [f], scale) for i, c, f in zip(indices, crops, flips, strict=True)
        ]
        return LatentBatch(
            latents,
            [c.original_size for c in crops],
            [c.crop_top_left for c in crops],
            (int(pixels.shape[2]), int(pixels.shape[3])),
            controls,
            batch_mask([None if m is None else m[0] for m in masks], latents),
        )


if TYPE_CHECKING:  # the on-disk cache's source (training/inputs/latents_disk.py) imports this module
    from lorastudio.training.inputs.latents_disk import DiskLatents

    LatentSource = CachedLatents | EncodedPerStep | DiskLatents
else:
    LatentSource = CachedLatents | EncodedPerStep
