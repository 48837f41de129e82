"""The keys of the on-disk latent cache (data/disk_cache.py): which crop/flip variants a run caches
of each image, drawn exactly as the in-memory cache draws them (training/inputs/latents.py: per image
its flips, then each variant's crop offset, from the run's numpy rng), and each variant's shard
key. No image is decoded and no torch is imported: the preflight counts the shards a run will
reuse with the same keys the run computes.

A paired item's key also holds how its controls are sized (TrainConfig.control_resolution and
each control's training size, ImageItem.control_sizes: data/control_sizing.py), so a run under
another rule re-encodes its controls rather than read latents of another size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lorastudio.data.disk_cache import shard_key

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan, ImageItem
    from lorastudio.families.spec import FamilySpec


def variant_flips(variants: int, random_flip: bool, rng: np.random.Generator) -> list[bool]:
    """Flip flags of an image's cached variants: alternating (half flipped) when there are
    several, a coin toss for a single variant, none without random_flip."""
    if not random_flip:
        return [False] * variants
    if variants == 1:
        return [bool(rng.random() < 0.5)]
    return [v % 2 == 1 for v in range(variants)]


def encoder_parts(spec: FamilySpec, vae: str, dtype: str, device: str) -> dict[str, Any]:
    """The key parts of a run's VAE encode: family, the VAE's content fingerprint
    (disk_cache.component_fingerprint), the dtype it encodes in ("fp32" for a VAE the family keeps
    in fp32, else the run's compute dtype: fp32 / bf16 / fp16) and the device kind."""
    return {
        "family": spec.name,
        "vae": vae,
        "dtype": "fp32" if spec.vae_in_fp32 else dtype,
        "device": device,
    }


@dataclass(frozen=True)
class Variant:
    """One cached crop/flip variant of an image: its shard key, the rng's bit generator state as
    it was before its crop draws (`rng_state`: `replay_rng` makes the rng of it again, to decode
    the variant on a miss), and what LatentBatch reports of it."""

    key: str
    # the bit generator's state dict (~0.5 KB; a deepcopy of the Generator per variant cost
    # ~0.4 ms and ~0.8 KB: RELIABILITY 2191); dropped once the cache is built
    rng_state: dict[str, Any] | None
    flip: bool
    original_size: tuple[int, int]  # (height, width) of the source
    crop_top_left: tuple[int, int]  # (top, left) after the flip, as data.load_crop reports it


def replay_rng(state: dict[str, Any]) -> np.random.Generator:
    """A Generator whose bit generator is of the kind and in the state `state` (a
    `bit_generator.state` dict, as plan_variants keeps per variant): it draws what the rng drew
    from that state."""
    kind = getattr(np.random, str(state["bit_generator"]), None)
    if not (isinstance(kind, type) and issubclass(kind, np.random.BitGenerator)):
        raise ValueError(f"not a numpy bit generator's state: {state.get('bit_generator')!r}")
    bits = kind()
    bits.state = state
    return np.random.Generator(bits)


def image_hashes(item: ImageItem) -> tuple[str, list[str]]:
    """sha256 of an item's image bytes and of each of its control images, as its scan read them
    (ImageItem.sha256, control_sha256: a shard of the run's own images is looked up, never one of
    a file changed since), else as they are now (data.scan.file_sha256)."""
    from lorastudio.data.scan import control_sha256, file_sha256

    controls = list(item.control_sha256 or control_sha256(item))
    return item.sha256 or file_sha256(item.path, item.folder_id), controls


def control_parts(item: ImageItem, rule: str | int) -> dict[str, Any]:
    """The key parts of how a paired item's controls are encoded: the control_resolution `rule`
    and every control's training (width, height) ([] where they take their target's crop); {}
    for an item without controls (its key is a text-to-image one). Where they take their
    target's crop, "controls_aligned" lists the slots of the controls of their target's shape up
    to pixel rounding whose own cover size is not the target's (data.crop.same_shape: cut with
    the target's crop since RELIABILITY 550, centre-cropped before), so no latent of the old cut
    is read for them; absent where there is none, keeping every other key as it was."""
    from lorastudio.data.crop import resized_size, same_shape

    if not item.controls:
        return {}
    parts: dict[str, Any] = {
        "control_rule": rule,
        "control_sizes": [list(size) for size in item.control_sizes],
    }
    if not item.control_sizes:
        resized = resized_size(item.width, item.height, item.bucket)
        aligned = [
            slot
            for slot, (w, h) in enumerate(item.control_dims)
            if resized_size(w, h, item.bucket) != resized and same_shape((w, h), resized)
        ]
        if aligned:
            parts["controls_aligned"] = aligned
    return parts


def cache_bytes(
    buckets: Sequence[tuple[int, int]],
    variants: int,
    channels: int,
    scale: int,
    controls: int = 0,
    control_sizes: Sequence[tuple[int, int]] = (),
) -> int:
    """RAM the in-memory cache would take: mean + std (+ one mean per control image), fp32,
    `variants` per image of bucket (w, h); `control_sizes`: every control's own (w, h) where
    controls are sized on their own (then `controls` is not used), else `controls` of the
    bucket's size each. (Here, without torch, for the preflight and the run alike.)"""
    cells = sum((w // scale) * (h // scale) for w, h in buckets)
    if control_sizes:
        own = sum((w // scale) * (h // scale) for w, h in control_sizes)
        return (cells * 2 + own) * channels * variants * 4
    return cells * channels * variants * (2 + controls) * 4


def plan_variants(
    items: Sequence[ImageItem], cfg: TrainConfig, rng: np.random.Generator, encoder: dict[str, Any]
) -> list[list[Variant]]:
    """Every image's cfg.cache_variants variants with their shard keys; advances `rng` exactly as
    build_latent_cache does. `encoder`: the key parts of the encode (family, VAE fingerprint,
    dtype, device kind); a paired item's keys add control_parts. Reads every image's bytes
    (its hash), decodes none."""
    from lorastudio.data.crop import crop_offset, resized_size
    from lorastudio.data.pixel_rule import decode_rule

    out = []
    for item in items:
        image, controls = image_hashes(item)
        decode = decode_rule(item)  # the new pixel rule only where it reads otherwise (fix 553)
        sizing = control_parts(item, cfg.control_resolution)
        resized = resized_size(item.width, item.height, item.bucket)
        variants = []
        for flip in variant_flips(int(cfg.cache_variants), cfg.random_flip, rng):
            before = rng.bit_generator.state  # a new dict each time: the rng's state now
            top, left = crop_offset(resized, item.bucket, random_crop=cfg.random_crop, rng=rng)
            parts = {
                **encoder,
                "decode": decode,
                "image": image,
                "controls": controls,
                **sizing,
                "bucket": list(item.bucket),
                "resized": list(resized),
                "crop": [top, left],
                "flip": flip,
            }
            shown_left = resized[0] - left - item.bucket[0] if flip else left
            variants.append(
                Variant(shard_key(parts), before, flip, (item.height, item.width), (top, shown_left))
            )
        out.append(variants)
    return out


def run_cache_bytes(cfg: TrainConfig, scan: DatasetScan, spec: FamilySpec) -> int:
    """`cache_bytes` of a run: its scan's buckets, cfg.cache_variants, the family's latent shape,
    controls at their own sizes. The one sizing the run's latent mode (training/loop_inputs.
    run_latent_mode), the preflight and the run's identity (training/resume/identity.py) all read."""
    return cache_bytes(
        [it.bucket for it in scan.items],
        int(cfg.cache_variants or 1),
        spec.latent_channels,
        spec.vae_scale_factor,
        controls=scan.controls_per_image(),
        control_sizes=[size for it in scan.items for size in it.control_sizes],
    )
