"""The maths audit (session 28): training's latent normalisation is the one the family's pipeline
undoes before its VAE decodes (what sample previews and generation render). A seeded image's
latents as training encodes them (Family.encode_pixels, the posterior mean) handed to the real
pipeline as its `latents=` for one step whose denoiser predicts nothing (a forward hook zeroes
its output: the Euler step then leaves the latents as they are) decode to exactly the image the
VAE alone decodes from its own raw posterior mean. A normalisation that differs between training
and the pipeline (a scale, a shift, per-channel statistics, a patchify order) fails it."""

from __future__ import annotations

import inspect

import pytest
import torch

from lorastudio import families
from lorastudio.generate.references import reference_kwargs

RES = 64  # FLUX.2's references need 64 px; one size for all
PROMPT = "a red circle"


def _image() -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    coarse = torch.rand(1, 3, 4, 4, generator=g) * 2 - 1
    return torch.nn.functional.interpolate(coarse, size=(RES, RES), mode="bilinear", align_corners=False)


def _zero_output(module, args, kwargs, out):
    """The denoiser predicts 0 (velocity or epsilon): one Euler step leaves the latents unchanged."""
    if isinstance(out, tuple):  # Z-Image: a list of per-image tensors first
        first = (
            [torch.zeros_like(x) for x in out[0]] if isinstance(out[0], list) else torch.zeros_like(out[0])
        )
        return (first, *out[1:])
    out.sample = torch.zeros_like(out.sample)
    return out


def _vae_alone(family: str, vae, pixels: torch.Tensor) -> torch.Tensor:
    """The VAE's own round trip of pixels [1, 3, H, W]: decode(posterior mean), as [1, 3, H, W]
    in [0, 1] (the pipelines' postprocess: x / 2 + 0.5, clamped)."""
    video = pixels.ndim == 4 and "Qwen" in type(vae).__name__  # the Qwen-Image VAE takes frames
    x = pixels[:, :, None] if video else pixels
    raw = vae.encode(x).latent_dist.mean
    out = vae.decode(raw, return_dict=False)[0]
    out = out[:, :, 0] if video else out
    return (out / 2 + 0.5).clamp(0, 1)


@pytest.mark.parametrize("family", families.names())
def test_training_latents_decode_through_the_pipeline_as_the_vae_decodes_them(family, tiny_model):
    from diffusers import DiffusionPipeline, EulerDiscreteScheduler
    from PIL import Image

    base = str(tiny_model(family))
    fam = families.get(family)
    pipe = DiffusionPipeline.from_pretrained(base)
    pipe.set_progress_bar_config(disable=True)
    pixels = _image()
    with torch.no_grad():
        latents = fam.encode_pixels(pipe.vae, pixels)[0]  # [1, C, h, w] normalised, as training
        expected = _vae_alone(family, pipe.vae, pixels)
    start = fam.to_pipeline_latents(pipe, latents)
    if fam.spec.objective == "ddpm":  # Euler on the DDPM sigmas: latents enter x init_noise_sigma
        pipe.scheduler = EulerDiscreteScheduler.from_config(
            pipe.scheduler.config, timestep_spacing="trailing"
        )
        pipe.scheduler.set_timesteps(1)
        start = start / pipe.scheduler.init_noise_sigma
    elif pipe.scheduler.config.get("shift_terminal"):  # a 1-step schedule cannot be stretched
        pipe.scheduler = pipe.scheduler.from_config(pipe.scheduler.config, shift_terminal=None)
    getattr(pipe, fam.spec.denoiser).register_forward_hook(_zero_output, with_kwargs=True)
    kwargs = {k: v for k, v in fam.spec.generation_defaults.items() if k != "num_inference_steps"}
    kwargs |= dict(fam.spec.no_cfg_kwargs)
    low, high = fam.source_control_images(base)
    if low > 0:  # an edit checkpoint needs its reference (the prediction ignores it here)
        refs = [Image.new("RGB", (RES, RES), (200, 30, 30))] * high
        kwargs |= reference_kwargs(pipe, high, refs, RES, RES)
    if "max_area" in inspect.signature(type(pipe).__call__).parameters:
        kwargs["max_area"] = RES**2
    with torch.no_grad():
        out = pipe(
            prompt=PROMPT,
            height=RES,
            width=RES,
            num_inference_steps=1,
            latents=start,
            output_type="pt",
            **kwargs,
        ).images  # [1, 3, H, W] in [0, 1]
    inside = ((expected > 0.01) & (expected < 0.99)).float().mean()
    assert inside > 0.2  # most pixels unclamped: the comparison sees the values
    torch.testing.assert_close(out.float(), expected, rtol=1e-4, atol=1e-4)
