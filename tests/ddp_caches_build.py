"""Phases 1 and 2 of a run as train() calls them, for the data-parallel cache tests
(unit/training/test_ddp_caches.py): one process's caches, and the config they are built from;
tests/ddp_launch.py runs build_caches in each launched rank."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.data import scan_dataset
from lorastudio.training.inputs import conditioning
from lorastudio.training.inputs.conditioning import captions_to_encode, encode_texts
from lorastudio.training.inputs.latents import build_latent_cache

CACHE_CHUNK = 2  # captions per encoder call: several chunks, so the rounds are uneven


def build_caches(cfg: TrainConfig) -> dict:
    """Phase 1 and 2 of a run as train() calls them: the conditioning (captions + sample prompts)
    and the latent cache, with the rng state after them and the number of stop polls."""
    conditioning.ENCODE_CHUNK = CACHE_CHUNK
    cfg = resolve_train_config(cfg)
    family = families.get(cfg.family)
    items = scan_dataset(
        Path(cfg.data_dir),
        resolution=int(cfg.resolution or 0),
        multiple=family.spec.resolution_multiple,
        aspect_buckets=cfg.aspect_buckets,
    ).items
    rng = np.random.default_rng(cfg.seed)
    polls = {"n": 0}

    def stop() -> None:
        polls["n"] += 1

    texts = [captions_to_encode([it.caption for it in items], cfg.caption_dropout), cfg.sample_prompts]
    device = torch.device("cpu")
    conds = encode_texts(
        family, cfg, texts, dtype=torch.float32, device=device, emit=[].append, check_stop=stop
    )
    vae = family.load_vae(cfg.base_model, cfg.revision, torch.float32, device)
    cache = build_latent_cache(family, vae, items, cfg, rng, device=device, emit=[].append, check_stop=stop)
    return {
        "conds": conds,
        "means": cache.means,
        "stds": cache.stds,
        "crops": cache.crops,
        "sizes": cache.sizes,
        "rng": rng.bit_generator.state,
        "polls": polls["n"],
        "texts": sum(len(group) for group in texts),
    }


def caches_config(make_config: Callable[..., TrainConfig]) -> TrainConfig:
    return make_config(
        random_crop=True,
        random_flip=True,
        cache_variants=2,
        aspect_buckets=False,  # the non-square image is cropped square: random crops have slack
        caption_dropout=0.1,
        sample_prompts=["a red square", "a blue circle", "a green ring"],
    )
