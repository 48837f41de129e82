"""The preflight's latent cache section: where the run caches its VAE latents (cfg.latent_cache,
data/disk_cache.latent_mode) and, on disk, how many images' shards it will find already there.

The count uses the run's own keys (data/latent_keys.plan_variants with the run's seed: the same
crop/flip draws) and the VAE's content fingerprint, so a second run on the same data and model
reports "reuses M of M". The captions' text embeddings (also on disk in that mode) are counted
the same way (data/text_keys.py); the wall-time forecast scales its encode phases by what is left. A shard is only looked up here; the run verifies each it reads (a
damaged one is re-encoded). A run whose latents exceed the cache's cap (data/cache_prune.py) is
told that its end prunes them. No model is loaded and no image decoded; every image's bytes are
hashed (the scan's fingerprint hashed them already: data.scan.file_sha256 remembers them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lorastudio import families
from lorastudio.data.cache_prune import cap_bytes
from lorastudio.data.caption_variants import captions_to_encode, item_dropouts, scan_variants
from lorastudio.data.disk_cache import (
    cache_root,
    component_fingerprint,
    count_present,
    folder_bytes,
    latent_mode,
)
from lorastudio.data.latent_keys import encoder_parts, plan_variants, run_cache_bytes
from lorastudio.data.text_keys import KIND, TORCH_DTYPE_NAMES, text_fingerprint, text_key, text_parts
from lorastudio.training.inputs.text_signature import PROBE_TEXTS, read_signature, signature_path

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.jobs.hardware import HostInfo
    from lorastudio.settings import Settings


def latent_cache_section(
    cfg: TrainConfig, scan: DatasetScan, host: HostInfo, dtype: str, settings: Settings
) -> dict[str, Any]:
    """{"setting", "mode" ("memory" | "disk" | "per_step"), "ram_gb" (what the RAM cache would
    take), and on disk: "folder", "disk_bytes" (its size now), "images", "images_cached", "texts"
    / "texts_cached" (the captions phase 1 encodes / finds on disk; None where they stay in RAM),
    "texts_probed" (probe captions phase 1 encodes besides, training/inputs/text_signature.py),
    "note"}.
    `dtype`: the run's compute dtype (jobs.hardware.resolved_dtype; fp8/int8/nf4 compute in bf16)."""
    from lorastudio.families.single_file import model_source

    spec = families.get(cfg.family).spec
    need = run_cache_bytes(cfg, scan, spec)  # as the run sizes it (training/loop_inputs.run_latent_mode)
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
    texts = _texts_on_disk(cfg, scan, host, compute, root, settings.text_signature_dir)
    captions = f"; reuses {texts[1]} of {texts[0]} captions' embeddings" if texts else ""
    if texts and texts[2]:
        captions += f" (+ {texts[2]} probe captions: what the text encoders give, learnt once)"
    cap = cap_bytes(settings, root, folder_bytes(folder))  # about: the default counts all the cache
    over = (
        f"; its {need / 1e9:.2f} GB of latents exceed the cache's cap of {cap / 1e9:.2f} GB"
        " (LORASTUDIO_CACHE_MAX_GB): the run's end prunes them and the next run encodes them again"
        if need > cap
        else ""
    )
    out.update(
        folder=str(folder),
        disk_bytes=folder_bytes(folder),
        images=len(keys),
        images_cached=cached,
        texts=texts[0] if texts else None,
        texts_cached=texts[1] if texts else None,
        texts_probed=texts[2] if texts else 0,
        note=f"latents on disk: reuses {cached} of {len(keys)} images' latents, encodes {len(keys) - cached}"
        + captions
        + over,
    )
    return out


def _texts_on_disk(
    cfg: TrainConfig, scan: DatasetScan, host: HostInfo, compute: str, root: Path, signatures: Path
) -> tuple[int, int, int] | None:
    """(captions phase 1 encodes, those with a shard on disk, probe captions it encodes besides:
    none once the home keeps its encoders' signature, training/inputs/text_signature.py) of a
    disk-cached run, keyed as training/inputs/conditioning_disk.py keys them; None where the captions
    stay in RAM (a family whose prompt sees the control images, train_text_encoder)."""
    from lorastudio.families.single_file import model_source

    spec = families.get(cfg.family).spec
    if spec.prompt_sees_controls or cfg.train_text_encoder:
        return None
    variants = scan_variants(scan, cfg.caption_variants, cfg.seed)
    captions = [it.caption for it in scan.items] + [v for vs in variants for v in vs]
    texts = captions_to_encode(captions, item_dropouts(scan, cfg.caption_dropout))
    model = text_fingerprint(model_source(cfg), cfg.revision)
    parts = text_parts(
        spec.name, model, TORCH_DTYPE_NAMES.get(compute, compute), host.device, cfg.max_sequence_length
    )
    kept = read_signature(signature_path(signatures, model, parts)) is not None
    return (
        len(texts),
        count_present(root, KIND, model, [text_key(parts, t) for t in texts]),
        0 if kept or not texts else len(PROBE_TEXTS),
    )
