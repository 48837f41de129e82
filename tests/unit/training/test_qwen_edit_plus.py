"""Qwen-Image-Edit-2511 (Plus, zero_cond_t) with two reference images: `predict` equals one
denoising step of QwenImageEditPlusPipeline ("Picture 1", "Picture 2" in the prompt, both
references' tokens in the sequence, the references modulated at t = 0). The single-image edit
pipeline is covered by the contract suite (tests/families); this is the multi-image flavour.
Slow: the pipeline encodes each reference at ~1 MP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config

RES = 32
PROMPT = "put the red circle of picture 1 on picture 2"


@pytest.mark.slow
def test_predict_matches_one_plus_step_with_two_references(tmp_path):
    from diffusers import QwenImageEditPlusPipeline

    from lorastudio.tiny.qwen_edit import build_qwen_image_edit

    folder = tmp_path / "plus"
    build_qwen_image_edit(0, plus=True, zero_cond_t=True).save_pretrained(folder)
    fam = families.get("qwen-image-edit")
    assert fam.folder_variant(folder).name == "edit-2511"
    cfg = resolve_train_config(
        TrainConfig(family=fam.spec.name, base_model=str(folder), data_dir="unused", resolution=RES)
    )
    rng = np.random.default_rng(5)
    images = [Image.fromarray(rng.integers(0, 256, (RES, RES + 16 * k, 3), dtype=np.uint8)) for k in range(2)]
    dev, dt = torch.device("cpu"), torch.float32
    enc = fam.load_text_encoders(str(folder), None, dt, dev)
    assert isinstance(enc, QwenImageEditPlusPipeline)
    cond = fam.collate_conditioning(fam.encode_prompts(enc, [PROMPT], cfg, controls=[images]))
    vae = fam.load_vae(str(folder), None, dt, dev)
    with torch.no_grad():
        refs = [fam.encode_controls(vae, fam.reference_pixels(im, RES, RES)[None]) for im in images]
    assert refs[0].shape != refs[1].shape  # each reference keeps its own aspect ratio
    noise = torch.randn(1, 16, RES // 8, RES // 8, generator=torch.Generator().manual_seed(0))
    den = fam.load_denoiser(str(folder), None, dt, dev)
    info = {"original_size": [(RES, RES)], "crop_top_left": [(0, 0)], "target_size": (RES, RES)}
    with torch.no_grad():  # references of different sizes: one [1, C, hc, wc] per slot
        velocity = fam.predict(den, noise, torch.ones(1), cond, {**info, "controls": refs}, cfg)

    pipe = QwenImageEditPlusPipeline.from_pretrained(folder)
    pipe.scheduler = pipe.scheduler.from_config(pipe.scheduler.config, shift_terminal=None)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(
        prompt=PROMPT, image=images, height=RES, width=RES, num_inference_steps=1,
        latents=fam.to_pipeline_latents(pipe, noise), output_type="latent",
    ).images  # fmt: skip
    got = fam.from_pipeline_latents(pipe, out, (RES // 8, RES // 8))
    torch.testing.assert_close(got, noise - velocity, rtol=1e-4, atol=1e-4)
