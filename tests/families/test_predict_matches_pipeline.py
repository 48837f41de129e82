"""Contract: each family's `predict` hook speaks the same convention as the family's own
diffusers pipeline. One denoising step of the real pipeline from a known latent must equal the
step computed from `family.predict` (same conditioning, same time input, same sign). Families that
need control images (min >= 1 for the checkpoint's flavour) get the pipeline the reference images
(`image`) and the hooks their latents through batch_info["controls"] (Family.reference_pixels, as
the pipeline prepares a reference, encoded with encode_controls), and the images too where the
prompt sees them (spec.prompt_sees_controls). A family that also predicts without references
(min 0: FLUX.2) runs text-to-image here; test_reference_predict.py checks its references."""

from __future__ import annotations

import inspect

import pytest
import torch

from family_sides import RES, config_side
from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config

PROMPT = "a red circle on a blue background"


def _cfg(family: str, base: str, **extra) -> TrainConfig:
    fam = families.get(family)
    if "max_sequence_length" in fam.spec.supports:
        extra.setdefault("max_sequence_length", 64)
    return resolve_train_config(
        TrainConfig(
            family=family, base_model=base, data_dir="unused", resolution=config_side(family), **extra
        )
    )


def _references(family: str, base: str) -> tuple[list, torch.Tensor | None]:
    """Seeded reference images and their latents [1, K, C, hc, wc] as the family encodes them,
    for a family that needs references (as many as the checkpoint's flavour takes); ([], None)
    for one that also predicts without (spec.control_images min 0: its references are
    tests/families/test_reference_predict.py's) and for a text-to-image family."""
    import numpy as np
    from PIL import Image

    fam = families.get(family)
    low, high = fam.source_control_images(base)
    count = high if low > 0 else 0
    if not count:
        return [], None
    rng = np.random.default_rng(3)
    images = [Image.fromarray(rng.integers(0, 256, (RES, RES, 3), dtype=np.uint8)) for _ in range(count)]
    vae = fam.load_vae(base, None, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        latents = [fam.encode_controls(vae, fam.reference_pixels(im, RES, RES)[None])[0] for im in images]
    return images, torch.stack(latents)[None]  # [1, K, C, hc, wc]


def _hooks_prediction(family: str, base: str, cfg: TrainConfig, noisy, level, controls=None, images=()):
    fam = families.get(family)
    dev, dt = torch.device("cpu"), torch.float32
    enc = fam.load_text_encoders(base, None, dt, dev)
    seen = {"controls": [list(images)]} if fam.spec.prompt_sees_controls else {}
    cond = fam.collate_conditioning(fam.encode_prompts(enc, [PROMPT], cfg, **seen))
    den = fam.load_denoiser(base, None, dt, dev)
    info = {"original_size": [(RES, RES)], "crop_top_left": [(0, 0)], "target_size": (RES, RES)}
    if controls is not None:
        info["controls"] = controls  # [1, K, C, h, w]
    with torch.no_grad():
        return fam.predict(den, noisy, level, cond, info, cfg)


@pytest.mark.parametrize("family", [n for n in families.names() if families.get(n).spec.objective == "flow"])
def test_flow_predict_matches_one_pipeline_step(family, tiny_model):
    """From pure noise (sigma 1) one Euler step to sigma 0 gives x0 = noise - velocity. The
    pipeline runs one conditional pass (spec.no_cfg_kwargs), in its own latent layout."""
    from diffusers import DiffusionPipeline

    base = str(tiny_model(family))
    fam = families.get(family)
    # a guidance-embedding family trains and renders at its generation guidance; CFG stays off
    guidance = fam.spec.generation_defaults.get("guidance_scale") if "guidance" in fam.spec.supports else None
    cfg = _cfg(family, base, **({"guidance": guidance} if guidance is not None else {}))
    h = w = RES // fam.spec.vae_scale_factor
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(1, fam.spec.latent_channels, h, w, generator=g)
    images, controls = _references(family, base)

    velocity = _hooks_prediction(family, base, cfg, noise, torch.ones(1), controls, images)  # [1, C, h, w]
    expected = noise - velocity

    pipe = DiffusionPipeline.from_pretrained(base)
    if pipe.scheduler.config.get("shift_terminal"):  # a 1-step schedule cannot be stretched to a terminal
        pipe.scheduler = pipe.scheduler.from_config(pipe.scheduler.config, shift_terminal=None)
    pipe.set_progress_bar_config(disable=True)
    kwargs = {k: v for k, v in fam.spec.generation_defaults.items() if k != "num_inference_steps"}
    kwargs.update(fam.spec.no_cfg_kwargs)
    if images:  # the reference images
        kwargs["image"] = images[0] if len(images) == 1 else images
    if "max_area" in inspect.signature(type(pipe).__call__).parameters:  # the output size as asked
        kwargs["max_area"] = RES**2  # (Kontext sizes its output by it, with or without an image)
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
    torch.testing.assert_close(got.float(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", [n for n in families.names() if families.get(n).spec.objective == "ddpm"])
def test_ddpm_predict_matches_one_pipeline_step(family, tiny_model):
    """A one-step Euler run from the top timestep equals x - sigma * epsilon(x / sqrt(sigma^2+1), t)."""
    from diffusers import DiffusionPipeline, EulerDiscreteScheduler

    base = str(tiny_model(family))
    fam = families.get(family)
    cfg = _cfg(family, base)
    pipe = DiffusionPipeline.from_pretrained(base)
    pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config, timestep_spacing="trailing")
    pipe.set_progress_bar_config(disable=True)
    assert pipe.scheduler.config.prediction_type == "epsilon"
    h = w = RES // fam.spec.vae_scale_factor
    start = torch.randn(1, fam.spec.latent_channels, h, w, generator=torch.Generator().manual_seed(0))

    pipe.scheduler.set_timesteps(1)
    t = pipe.scheduler.timesteps[:1]
    sigma = float(pipe.scheduler.sigmas[0])
    x = start * pipe.scheduler.init_noise_sigma
    eps = _hooks_prediction(family, base, cfg, x / (sigma**2 + 1) ** 0.5, t.long())
    expected = x - sigma * eps

    out = pipe(
        prompt=PROMPT,
        height=RES,
        width=RES,
        num_inference_steps=1,
        latents=start,
        guidance_scale=1.0,
        output_type="latent",
    ).images
    torch.testing.assert_close(out.float(), expected, rtol=1e-4, atol=1e-4)
