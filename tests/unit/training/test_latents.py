"""The latent cache: same distribution as encoding every step, and its RAM estimate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lorastudio import families
from lorastudio.config import resolve_train_config
from lorastudio.data import load_crop, scan_dataset
from lorastudio.training.inputs.latents import (
    CachedLatents,
    EncodedPerStep,
    build_latent_cache,
    cache_bytes,
    variant_flips,
)
from lorastudio.training.loop import train


@pytest.fixture(scope="module")
def flux_vae(tiny_model):
    family = families.get("flux")
    return family, family.load_vae(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))


def _noop() -> None:
    return None


def test_cached_draws_match_per_step_encoding_in_distribution(flux_vae, small_dataset, make_config):
    family, vae = flux_vae
    cfg = resolve_train_config(make_config())
    items = scan_dataset(small_dataset, resolution=32, multiple=16).items[:1]
    cache = build_latent_cache(
        family,
        vae,
        items,
        cfg,
        np.random.default_rng(0),
        device=torch.device("cpu"),
        emit=[].append,
        check_stop=_noop,
    )
    per_step = EncodedPerStep(family, vae, items, cfg, np.random.default_rng(0))
    n = 400
    cached = cache.sample(
        [0] * n, torch.Generator().manual_seed(1), torch.float32, torch.device("cpu")
    ).latents
    fresh = per_step.sample(
        [0] * n, torch.Generator().manual_seed(2), torch.float32, torch.device("cpu")
    ).latents
    crop = load_crop(items[0], random_crop=False, flip=False, rng=np.random.default_rng(0))
    with torch.no_grad():
        mean, std = family.encode_pixels(vae, torch.from_numpy(crop.pixels[None]))  # [1, C, h, w]
    assert cached.shape == fresh.shape == (n, *mean.shape[1:])
    for draws in (cached, fresh):
        standard_error = std[0] / n**0.5
        assert ((draws.mean(0) - mean[0]).abs() < 5 * standard_error).all()
        assert ((draws.std(0) / std[0] - 1).abs() < 0.2).all()
    # and the two sources are not the same draws (independent noise)
    assert not torch.equal(cached, fresh)


def test_draws_are_fp32_then_cast_to_the_training_dtype(flux_vae, small_dataset, make_config):
    family, vae = flux_vae
    items = scan_dataset(small_dataset, resolution=32, multiple=16).items[:2]
    cache = build_latent_cache(
        family,
        vae,
        items,
        resolve_train_config(make_config()),
        np.random.default_rng(0),
        device=torch.device("cpu"),
        emit=[].append,
        check_stop=_noop,
    )
    assert all(m.dtype == torch.float32 for m in cache.means + cache.stds)
    bf16 = cache.sample([0, 1], torch.Generator().manual_seed(0), torch.bfloat16, torch.device("cpu")).latents
    fp32 = cache.sample([0, 1], torch.Generator().manual_seed(0), torch.float32, torch.device("cpu")).latents
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, fp32.to(torch.bfloat16))


def test_cache_size_estimate_is_the_cached_bytes(flux_vae, small_dataset, make_config):
    family, vae = flux_vae
    cfg = make_config(resolution=64, random_crop=True, cache_variants=3)
    items = scan_dataset(small_dataset, resolution=64, multiple=16).items
    cache = build_latent_cache(
        family,
        vae,
        items,
        cfg,
        np.random.default_rng(0),
        device=torch.device("cpu"),
        emit=[].append,
        check_stop=_noop,
    )
    held = sum(t.numel() * t.element_size() for t in cache.means + cache.stds)
    spec = family.spec
    assert cache_bytes([it.bucket for it in items], 3, spec.latent_channels, spec.vae_scale_factor) == held
    assert all(m.shape[0] == 3 for m in cache.means)


def test_variants_alternate_flips():
    rng = np.random.default_rng(0)
    assert variant_flips(4, True, rng) == [False, True, False, True]
    assert variant_flips(3, False, rng) == [False] * 3
    singles = {variant_flips(1, True, rng)[0] for _ in range(40)}
    assert singles == {True, False}


def test_over_budget_cache_falls_back_to_per_step_encoding(make_config):
    events: list = []
    result = train(
        make_config(latent_cache="memory", latent_cache_max_gb=0.0, steps=3), events.append, device="cpu"
    )
    assert result.steps_run == 3 and result.lora_path.is_file()
    assert not any(e.type == "preparing" and e.phase == "latents" for e in events)
    assert any(e.type == "model_load_completed" and e.component == "vae" for e in events)


def test_cached_sample_reports_each_variant_crop(small_dataset, make_config, flux_vae):
    family, vae = flux_vae
    cfg = make_config(random_crop=True, random_flip=True, cache_variants=4)
    items = [
        it for it in scan_dataset(small_dataset, resolution=32, multiple=16).items if it.width != it.height
    ]
    cache: CachedLatents = build_latent_cache(
        family,
        vae,
        items,
        cfg,
        np.random.default_rng(0),
        device=torch.device("cpu"),
        emit=[].append,
        check_stop=_noop,
    )
    offsets = {c[1] for c in cache.crops[0]}
    assert len(offsets) > 1  # random crops of a non-square image differ
    batch = cache.sample([0] * 16, torch.Generator().manual_seed(0), torch.float32, torch.device("cpu"))
    assert set(batch.crop_top_left) <= offsets and batch.target_size == (32, 32)
    assert set(batch.original_size) == {(items[0].height, items[0].width)}
