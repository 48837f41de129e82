"""The preflight's latent cache section: where the run caches its VAE latents (cfg.latent_cache,
data/disk_cache.latent_mode) and, on disk, how many images' shards it will find already there.

The count uses the run's own keys (data/latent_keys.plan_variants with the run's seed: the same
crop/flip draws) and the VAE's content fingerprint, so a second run on the same data and model
reports "reuses M of M". A shard is only looked up here; the run verifies each it reads (a
damaged one is re-encoded). No model is loaded and no image decoded; every image's bytes are
hashed (the scan's fingerprint hashed them already: data.scan.file_sha256 remembers them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lorastudio import families
from lorastudio.data.disk_cache import (
    cache_root,
    component_fingerprint,
    count_present,
    folder_bytes,
    latent_mode,
)
from lorastudio.data.latent_keys import (
    cache_bytes,
    encoder_parts,
    plan_variants,
    text_fingerprint,
    text_keys,
)

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.jobs.hardware import HostInfo
    from lorastudio.settings import Settings


def latent_cache_section(
    cfg: TrainConfig, scan: DatasetScan, host: HostInfo, dtype: str, settings: Settings
) -> dict[str, Any]:
    """{"setting", "mode" ("memory" | "disk" | "per_step"), "ram_gb" (what the RAM cache would
    take), and on disk: "folder", "disk_bytes" (its size now), "images", "images_cached", "note"}.
    `dtype`: the run's compute dtype (jobs.hardware.resolved_dtype; fp8/int8/nf4 compute in bf16)."""
    from lorastudio.families.single_file import model_source

    spec = families.get(cfg.family).spec
    need = cache_bytes(  # as the run sizes it (training/loop._latent_mode): controls at their own sizes
        [it.bucket for it in scan.items],
        int(cfg.cache_variants or 1),
        spec.latent_channels,
        spec.vae_scale_factor,
        controls=scan.controls_per_image(),
        control_sizes=[size for it in scan.items for size in it.control_sizes],
    )
    mode = latent_mode(cfg.latent_cache, need, cfg.latent_cache_max_gb)
    out: dict[str, Any] = {"setting": cfg.latent_cache, "mode": mode, "ram_gb": round(need / 1e9, 3)}
    if mode != "disk":
        return out
    root = cache_root(settings)
    model = component_fingerprint(model_source(cfg), "vae", cfg.revision)
    compute = "bf16" if dtype in ("fp8", "int8", "nf4") else dtype
    keys = plan_variants(
        scan.items, cfg, np.random.default_rng(cfg.seed), encoder_parts(spec, model, compute, host.device)
    )
    cached = sum(count_present(root, "latents", model, [v.key for v in vs]) == len(vs) for vs in keys)
    folder = root / "latents" / model
    note = f"latents on disk: reuses {cached} of {len(keys)} images' latents, encodes {len(keys) - cached}"
    out.update(folder=str(folder), disk_bytes=folder_bytes(folder), images=len(keys), images_cached=cached)
    texts = _captions_on_disk(cfg, scan, host.device, compute, root)
    if texts is not None:
        out.update(captions=texts[1], captions_cached=texts[0])
        note += f"; captions: reuses {texts[0]} of {texts[1]}"
    out["note"] = note
    return out


def _captions_on_disk(
    cfg: TrainConfig, scan: DatasetScan, device: str, dtype: str, root: Path
) -> tuple[int, int] | None:
    """(cached, total) of the captions (and caption variants, "" with caption dropout) the run
    keeps on disk (training/conditioning_disk.py); None where its captions stay in RAM (a family
    whose prompt sees the control images, train_text_encoder)."""
    from lorastudio.data.caption_variants import item_dropouts, scan_variants
    from lorastudio.families.single_file import model_source

    spec = families.get(cfg.family).spec
    if spec.prompt_sees_controls or cfg.train_text_encoder:
        return None
    variants = scan_variants(scan, cfg.caption_variants, cfg.seed)
    dropouts = item_dropouts(scan, cfg.caption_dropout)
    # as training.conditioning.captions_to_encode: unique, first seen, "" when any dropout is on
    texts = list(dict.fromkeys([it.caption for it in scan.items] + [v for vs in variants for v in vs]))
    if max(dropouts, default=0.0) > 0 and "" not in texts:
        texts.append("")
    model = text_fingerprint(model_source(cfg), cfg.revision)
    keys = text_keys(spec, model, dtype, device, cfg.max_sequence_length, texts)
    return count_present(root, "text", model, list(keys.values())), len(texts)
