"""Control latents of paired datasets (training/inputs/latents.py): each variant's controls are cropped
and flipped like its target, encoded as the posterior mean (never noised) and handed to the
family in the batch; and a FLUX.1 Kontext LoRA exports in FLUX.1's kohya / ComfyUI layout."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from lorastudio import families
from lorastudio.config import resolve_train_config
from lorastudio.data import scan_dataset
from lorastudio.lora.files import convert_file
from lorastudio.training.inputs.latents import EncodedPerStep, build_latent_cache
from lorastudio.training.loop import train


@pytest.fixture(scope="module")
def kontext_vae(tiny_model):
    family = families.get("flux-kontext")
    return family, family.load_vae(str(tiny_model("flux-kontext")), None, torch.float32, torch.device("cpu"))


@pytest.fixture
def same_picture_pairs(small_dataset, tmp_path):
    """Every control is its target's own file: aligned crops must give identical latents."""
    out = tmp_path / "pairs"
    shutil.copytree(small_dataset, out)
    (out / "control").mkdir()
    for img in out.glob("*.png"):
        shutil.copy(img, out / "control" / img.name)
    return out


def test_cached_controls_are_the_posterior_mean_of_the_aligned_crop(
    kontext_vae, same_picture_pairs, make_config
):
    family, vae = kontext_vae
    cfg = resolve_train_config(
        make_config("flux-kontext", random_crop=True, random_flip=True, cache_variants=4)
    )
    items = scan_dataset(
        same_picture_pairs, resolution=32, multiple=16, control_images=family.spec.control_images
    ).items
    assert all(len(it.controls) == 1 for it in items)
    cache = build_latent_cache(
        family, vae, items, cfg, np.random.default_rng(0), device=torch.device("cpu"),
        emit=[].append, check_stop=lambda: None,
    )  # fmt: skip
    for i in range(len(items)):
        assert cache.controls[i].shape == (4, 1, *cache.means[i].shape[1:])  # [V, N, C, h, w]
        torch.testing.assert_close(cache.controls[i][:, 0], cache.means[i], rtol=0, atol=1e-6)
    assert any(c[1] != cache.crops[0][0][1] for c in cache.crops[3])  # crops and flips did vary
    g = torch.Generator().manual_seed(0)
    batch = cache.sample([0, 3], g, torch.float32, torch.device("cpu"))
    assert batch.controls.shape == (2, 1, *batch.latents.shape[1:])  # [B, N, C, h, w]
    per_step = EncodedPerStep(family, vae, items, cfg, np.random.default_rng(0))
    fresh = per_step.sample([1, 2], g, torch.float32, torch.device("cpu"))
    assert fresh.controls.shape == (2, 1, *fresh.latents.shape[1:])
    assert not torch.equal(fresh.controls[:, 0], fresh.latents)  # targets drawn, controls the mean


def test_kontext_kohya_file_has_comfyui_flux_keys_and_converts_back_for_diffusers(
    make_config, tiny_model, tmp_path
):
    from diffusers import FluxKontextPipeline

    result = train(
        make_config("flux-kontext", lora_format="kohya", output_name="kohya"), [].append, device="cpu"
    )
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["family"] == "flux-kontext" and sidecar["lora_format"] == "kohya"
    comfy = sidecar["loaders"]["comfyui"]  # lora/portability.py: ComfyUI maps it as FLUX.1
    assert comfy["checked"] and comfy["ok"] and not comfy["unconsumed"]
    from safetensors import safe_open

    with safe_open(str(result.lora_path), "pt") as fh:
        keys = list(fh.keys())
    assert keys and all(k.startswith("lora_unet_") for k in keys)  # FLUX.1's kohya names
    # diffusers' kohya FLUX.1 reader hard-codes FLUX.1-dev sizes: back to diffusers' layout first
    back = convert_file(result.lora_path, tmp_path / "back.safetensors", to="diffusers")
    assert back == "kohya"
    pipe = FluxKontextPipeline.from_pretrained(str(tiny_model("flux-kontext")))
    pipe.load_lora_weights(str(tmp_path / "back.safetensors"))
    assert any(hasattr(m, "lora_A") and m.lora_A for m in pipe.transformer.modules())
