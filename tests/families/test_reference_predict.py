"""Contract: a family that trains text-to-image and edit alike (spec.control_images = (0, K))
predicts with reference images exactly as its pipeline denoises with `image=` references. The
references go to the pipeline as PIL images (what a user gives, through generate's own
reference_kwargs) and to the hooks as the pipeline prepares them (Family.reference_pixels)
through Family.encode_controls, and to encode_prompts too where the prompt sees them
(spec.prompt_sees_controls), so the test covers the encoding, the packing and the position ids
of the references at once. Families that need references (min >= 1: FLUX.1 Kontext,
Qwen-Image-Edit) are checked with them by test_predict_matches_pipeline.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.generate.references import reference_kwargs

PROMPT = "put the red circle from image 2 on the blue square of image 1"
RES = 64  # Flux2ImageProcessor.check_image_input refuses references under 64 px
BOTH = [
    n
    for n in families.names()
    if families.get(n).spec.control_images[0] == 0 < families.get(n).spec.control_images[1]
]


def _references(count: int) -> list[Image.Image]:
    rng = np.random.default_rng(5)
    return [Image.fromarray(rng.integers(0, 256, (RES, RES, 3), dtype=np.uint8)) for _ in range(count)]


@pytest.mark.parametrize("family", BOTH)
def test_predict_with_references_matches_one_pipeline_step(family, tiny_model):
    from diffusers import DiffusionPipeline

    base = str(tiny_model(family))
    fam = families.get(family)
    extra = {"max_sequence_length": 64} if "max_sequence_length" in fam.spec.supports else {}
    guidance = fam.spec.generation_defaults.get("guidance_scale") if "guidance" in fam.spec.supports else None
    if guidance is not None:
        extra["guidance"] = guidance
    cfg = resolve_train_config(
        TrainConfig(family=family, base_model=base, data_dir="unused", resolution=RES, **extra)
    )
    dev, dt = torch.device("cpu"), torch.float32
    refs = _references(min(2, fam.source_control_images(base)[1]))
    h = w = RES // fam.spec.vae_scale_factor
    noise = torch.randn(1, fam.spec.latent_channels, h, w, generator=torch.Generator().manual_seed(0))

    vae = fam.load_vae(base, None, dt, dev)
    with torch.no_grad():
        pixels = torch.stack([fam.reference_pixels(im, RES, RES) for im in refs])  # [K, 3, H, W]
        controls = fam.encode_controls(vae, pixels)[None]  # [1, K, C, h, w]
    enc = fam.load_text_encoders(base, None, dt, dev)
    seen = {"controls": [refs]} if fam.spec.prompt_sees_controls else {}
    cond = fam.collate_conditioning(fam.encode_prompts(enc, [PROMPT], cfg, **seen))
    den = fam.load_denoiser(base, None, dt, dev)
    info = {"original_size": [(RES, RES)], "crop_top_left": [(0, 0)], "target_size": (RES, RES)}
    with torch.no_grad():
        velocity = fam.predict(den, noise, torch.ones(1), cond, {**info, "controls": controls}, cfg)
        plain = fam.predict(den, noise, torch.ones(1), cond, info, cfg)
    assert not torch.allclose(velocity, plain, atol=1e-4)  # the references change the prediction

    pipe = DiffusionPipeline.from_pretrained(base)
    pipe.set_progress_bar_config(disable=True)
    if pipe.scheduler.config.get("shift_terminal"):  # a 1-step schedule cannot be stretched to a terminal
        pipe.scheduler = pipe.scheduler.from_config(pipe.scheduler.config, shift_terminal=None)
    kwargs = {k: v for k, v in fam.spec.generation_defaults.items() if k != "num_inference_steps"}
    kwargs |= dict(fam.spec.no_cfg_kwargs) | reference_kwargs(
        pipe, fam.source_control_images(base)[1], refs, RES, RES
    )
    out = pipe(
        prompt=PROMPT,
        height=RES,
        width=RES,
        num_inference_steps=1,
        latents=fam.to_pipeline_latents(pipe, noise),
        output_type="latent",
        max_sequence_length=cfg.max_sequence_length,
        **kwargs,
    ).images
    got = fam.from_pipeline_latents(pipe, out, (h, w))
    torch.testing.assert_close(got.float(), noise - velocity, rtol=1e-4, atol=1e-4)
