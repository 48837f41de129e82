"""The maths audit (session 28): one training step's loss, computed here from the definitions of
diffusers' own training scripts (examples/dreambooth/train_dreambooth_lora_*.py) and pipelines,
equals the loss lorastudio's step computes (training/step.forward_backward through the family's
objective, its cached posterior and its hooks) on the same images, posterior draw, timesteps and
noise, to fp32 tolerance.

Written independently of lorastudio's own code, per family, from the scripts:
  - the latents: the VAE's posterior sample, normalised as each script does: SDXL's
    `z * scaling_factor` (or `(z - latents_mean) * scaling_factor / latents_std` where the VAE
    config has them); FLUX.1 / Kontext / Chroma / Z-Image's `(z - shift_factor) * scaling_factor`;
    Qwen-Image / Qwen-Image-Edit / Krea 2's `(z - latents_mean) * (1 / latents_std)` on the 5-D
    video latents; FLUX.2 / klein's `Flux2Pipeline._patchify_latents` then the VAE's BatchNorm
    `(z - running_mean) / sqrt(running_var + eps)`;
  - the timesteps: logit-normal u = sigmoid(N(logit_mean, logit_std)) (training_utils'
    compute_density_for_timestep_sampling), shifted as the family's pipeline shifts its sigmas at
    inference (FlowMatchEulerDiscreteScheduler.time_shift with the pipeline module's
    calculate_shift mu, or the scheduler's static `shift`; FLUX.1 / Kontext unshifted, kohya's and
    the FLUX scripts' default); SDXL's uniform integer t through DDPMScheduler.add_noise /
    get_velocity and training_utils.compute_snr for min-SNR;
  - the noisy input (1 - sigma) x + sigma eps and the target eps - x, the mean squared error per
    sample, its min-SNR weight, the batch mean;
  - the denoiser call as the scripts write it (tests/families/script_reference.py: the
    pipeline's encode_prompt for the batch's two prompts of unequal length, its packing and
    position ids, time input, guidance, a reference per sample where the family takes them),
    on the pipeline's own copy of the denoiser.
Qwen-Image-Edit, which has no script, is the exception: its denoiser call is lorastudio's
Family.predict, which tests/families/test_predict_matches_pipeline.py checks against one step
of its pipeline (references included). Where lorastudio deliberately departs from a script
(a posterior sample where the FLUX.2 / Z-Image scripts take its mode; the pipeline's inference
shift where the Qwen-Image / Krea 2 / FLUX.2 scripts sample unshifted timesteps; guidance 1.0
where the FLUX scripts default to 3.5), the reference takes lorastudio's choice, named in the
family's docstring, and checks everything else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

from family_sides import RES, config_side
from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config

PROMPTS = ["a red circle on a blue background", "a green square"]


def _pixels(seed: int, size: tuple[int, int] = (RES, RES)) -> torch.Tensor:
    """Two smooth seeded images [2, 3, H, W] in [-1, 1] (not noise: a VAE reads them as images)."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(2, 3, 4, 4, generator=g) * 2 - 1  # [2, 3, 4, 4]
    return torch.nn.functional.interpolate(coarse, size=size, mode="bilinear", align_corners=False)


def _setup(family: str, base: str, **extra):
    fam = families.get(family)
    if "max_sequence_length" in fam.spec.supports:
        extra.setdefault("max_sequence_length", 32)
    if "timestep_sampling" in fam.spec.supports:
        extra.setdefault("timestep_sampling", "logit_normal")
        extra.setdefault("logit_mean", 0.3)
        extra.setdefault("logit_std", 1.2)
    return resolve_train_config(
        TrainConfig(
            family=family, base_model=base, data_dir="unused", resolution=config_side(family), **extra
        )
    )


def _controls(fam, vae, base: str):
    """The reference latents [2, K, C, h, w] of a family whose checkpoint needs references (the
    pipeline's encoding, checked by test_predict_matches_pipeline), with their images; else None."""
    import numpy as np
    from PIL import Image

    low, high = fam.source_control_images(base)
    if low == 0:
        return None, None
    rng = np.random.default_rng(3)
    images = [Image.fromarray(rng.integers(0, 256, (RES, RES, 3), dtype=np.uint8)) for _ in range(high)]
    with torch.no_grad():
        lat = fam.encode_controls(vae, torch.stack([fam.reference_pixels(im, RES, RES) for im in images]))
    return lat[None].expand(2, *lat.shape).contiguous(), images


def step_losses(
    family: str,
    base: str,
    seed: int = 0,
    prompts: Sequence[str] = PROMPTS,
    size: tuple[int, int] = (RES, RES),
    control_size: tuple[int, int] | None = None,
    **extra,
) -> tuple[float, float]:
    """(lorastudio's step loss, the scripts' loss) of one 2-sample step on the tiny `base` with
    the samples' `prompts`, images of `size` (H, W) pixels; a family that takes references
    trains the step with one per sample, of `control_size` (default: the same size)."""
    from diffusers import DDPMScheduler, DiffusionPipeline
    from diffusers.training_utils import compute_snr
    from tests.families.script_reference import (
        WRITTEN,
        check_defined,
        reference_latents,
        script_latents,
        script_prediction,
        script_sigmas,
    )

    from lorastudio.training.inputs.latents import CachedLatents
    from lorastudio.training.noise import make_objective
    from lorastudio.training.step import forward_backward

    check_defined(family)
    fam = families.get(family)
    cfg = _setup(family, base, **extra)
    dev, dt = torch.device("cpu"), torch.float32
    vae = fam.load_vae(base, None, dt, dev)
    den = fam.load_denoiser(base, None, dt, dev)
    next(den.parameters()).requires_grad_(True)  # something to backpropagate into
    enc = fam.load_text_encoders(base, None, dt, dev)
    sched_cfg = fam.scheduler_config(base, None)
    pixels = _pixels(seed, size)  # [2, 3, H, W]
    info = {
        "original_size": [(40, 36), (RES, RES)],
        "crop_top_left": [(4, 2), (0, 0)],
        "target_size": size,
    }
    ref_controls = None
    if family not in WRITTEN:  # Qwen-Image-Edit: its references as the hooks encode them
        controls, images = _controls(fam, vae, base)
        seen = {"controls": [images] * len(prompts)} if fam.spec.prompt_sees_controls and images else {}
        info["controls"] = controls
    else:
        seen = {}
        if fam.spec.control_images[1] > 0:  # one reference per sample
            control_pixels = _pixels(seed + 5, control_size or size)  # [2, 3, H', W']
            with torch.no_grad():
                info["controls"] = fam.encode_controls(vae, control_pixels)[:, None]  # [2, 1, C, h, w]
                ref_controls = reference_latents(family, vae, control_pixels)  # [2, C, h, w]
    cond = fam.collate_conditioning(fam.encode_prompts(enc, list(prompts), cfg, **seen))

    # lorastudio: the cached posterior, one draw, the objective's timesteps and noise, the step
    cache = CachedLatents()
    with torch.no_grad():
        for i in range(2):
            mean, std = fam.encode_pixels(vae, pixels[i : i + 1])  # [1, C, h, w] each
            cache.add_encoded(mean, std, ([(size, (0, 0))], size))
    draws = torch.Generator().manual_seed(seed + 100)
    batch = cache.sample([0, 1], draws, dt, dev)
    objective = make_objective(fam, cfg, sched_cfg)
    noise_gen = torch.Generator().manual_seed(seed + 200)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    ours = forward_backward(fam, den, objective, batch.latents, cond, info, cfg, noise_gen, 2, scaler)

    # the scripts: the same draws in the same order, everything else from their definitions
    ref_draws = torch.Generator().manual_seed(seed + 100)
    for _ in range(2):
        torch.randint(1, (1,), generator=ref_draws)  # the cache's pick of its one variant
    eps_latent = torch.randn(batch.latents.shape, generator=ref_draws)
    with torch.no_grad():
        x0 = script_latents(family, vae, pixels, eps_latent)  # [2, C, h, w]
    g = torch.Generator().manual_seed(seed + 200)
    if fam.spec.objective == "ddpm":
        sched = DDPMScheduler.from_config(sched_cfg)
        t = torch.randint(0, sched.config.num_train_timesteps, (2,), generator=g)
        noise = torch.randn(x0.shape, generator=g)
        noisy = sched.add_noise(x0, noise, t)
        target = noise if sched.config.prediction_type == "epsilon" else sched.get_velocity(x0, noise, t)
        level = t
        weights = torch.ones(2)
        if cfg.snr_gamma is not None:
            snr = compute_snr(sched, t)
            clipped = torch.stack([snr, cfg.snr_gamma * torch.ones_like(snr)], dim=1).min(dim=1)[0]
            weights = clipped / snr if sched.config.prediction_type == "epsilon" else clipped / (snr + 1)
    else:
        u = torch.sigmoid(cfg.logit_mean + cfg.logit_std * torch.randn(2, generator=g))
        sigmas = script_sigmas(family, u, tuple(x0.shape[2:]), sched_cfg)
        noise = torch.randn(x0.shape, generator=g)
        s = sigmas.view(2, 1, 1, 1)
        noisy = (1.0 - s) * x0 + s * noise
        target = noise - x0
        level = sigmas.float()
        weights = torch.ones(2)
    with torch.no_grad():
        if family in WRITTEN:  # the scripts' own denoiser call, on the pipeline's own parts
            pipe = DiffusionPipeline.from_pretrained(base)
            guidance = cfg.guidance if cfg.guidance is not None else None
            pred = script_prediction(
                family,
                pipe,
                noisy,
                level,
                prompts,
                guidance=guidance,
                max_sequence_length=cfg.max_sequence_length,
                info=info,
                controls=ref_controls,
            )
        else:
            pred = fam.predict(den, noisy, level, cond, info, cfg).float()
    per_sample = ((pred - target) ** 2).mean(dim=(1, 2, 3)) * weights
    return float(ours), float(per_sample.mean())


@pytest.mark.parametrize("family", families.names())
def test_the_step_loss_is_the_training_scripts_loss(family, tiny_model):
    ours, script = step_losses(family, str(tiny_model(family)))
    assert math.isfinite(ours) and ours > 0
    assert ours == pytest.approx(script, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("seed", [0, 1])
def test_sdxl_v_prediction_with_zero_terminal_snr_is_the_scripts_loss(seed, tiny_model, tmp_path):
    """An SDXL base whose scheduler predicts v on a zero-terminal-SNR schedule: the target is
    DDPMScheduler.get_velocity and min-SNR's weight min(snr, gamma) / (snr + 1) (the script's,
    training_utils.compute_snr), on the rescaled alphas_cumprod."""
    import json
    import shutil

    base = tmp_path / "sdxl-v"
    shutil.copytree(tiny_model("sdxl"), base)
    config = base / "scheduler" / "scheduler_config.json"
    update = {"prediction_type": "v_prediction", "rescale_betas_zero_snr": True}
    config.write_text(json.dumps({**json.loads(config.read_text()), **update}))
    ours, script = step_losses("sdxl", str(base), seed=seed)
    assert ours == pytest.approx(script, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("family", families.names())
def test_a_landscape_step_with_a_dropped_caption_is_the_scripts_loss(family, tiny_model):
    """32 x 48 px (H x W): a height and width swapped anywhere (packing, position ids, the
    shift's token count, SDXL's target size) changes the loss. One sample's caption is dropped:
    caption dropout's "" (training/inputs/conditioning.CaptionPicker) is conditioned as the pipeline's
    encode_prompt("") (the scripts' empty-prompt embeddings, not zeros), beside a caption in the
    same batch (padding and masks of unequal lengths)."""
    ours, script = step_losses(
        family, str(tiny_model(family)), seed=2, prompts=["", PROMPTS[1]], size=(32, 48)
    )
    assert ours == pytest.approx(script, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("family", ["flux-kontext", "flux2", "flux2-klein"])
def test_a_reference_of_another_size_is_placed_as_the_scripts_place_it(family, tiny_model):
    """A 48 x 32 px reference beside a 32 x 48 px target (control_resolution's own sizes): its
    tokens and position ids (Kontext's time coordinate 1, FLUX.2's 10) as the scripts and the
    pipelines lay them out."""
    ours, script = step_losses(family, str(tiny_model(family)), seed=3, size=(32, 48), control_size=(48, 32))
    assert ours == pytest.approx(script, rel=1e-5, abs=1e-7)
