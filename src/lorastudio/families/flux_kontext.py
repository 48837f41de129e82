"""FLUX.1 Kontext: the FLUX.1 transformer editing an image. The reference image's latents are
packed and appended to the image tokens, with position ids whose first axis is 1 (the target's
are 0); only the target tokens' prediction is the output. Trained on paired datasets: one control
image per target (data/pairs.py), sized as the pipeline sizes a reference
(TrainConfig.control_resolution), encoded as the pipeline encodes it (the posterior mean) and
never noised. A target without a control trains text-to-image, as FluxKontextPipeline generates
with image=None (FLUX.1's step: predict falls back to FluxFamily's), also mixed with pairs.

The conditioning is built by FluxKontextPipeline's own code (prepare_latents: packing, the
reference's position ids), called on the few attributes it reads, so `predict` is one denoising
step of the real pipeline. Prompts, guidance and the LoRA layout are FLUX.1's (ComfyUI loads
Kontext LoRAs as FLUX.1 ones), so the hooks other than predict are FluxFamily's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from lorastudio.data.control_sizing import KONTEXT_RESOLUTIONS, ControlSizing
from lorastudio.families.common import pack_2x2, unpack_2x2
from lorastudio.families.flux import SPEC as FLUX_SPEC
from lorastudio.families.flux import FluxFamily

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

SPEC = replace(
    FLUX_SPEC,
    name="flux-kontext",
    title="FLUX.1 Kontext",
    pipeline_class="FluxKontextPipeline",
    accepted_pipelines=("FluxKontextPipeline", "FluxKontextInpaintPipeline"),
    # the reference is resized to the output's size (as in training): the pipeline's snapping of
    # references to its preferred ~1 MP resolutions would give it another size than the target
    generation_defaults={"num_inference_steps": 28, "guidance_scale": 2.5, "_auto_resize": False},
    guidance="embedded",
    # one reference, or none: FluxKontextPipeline with image=None generates text-to-image
    control_images=(0, 1),
    edit_model=True,
    # the pipeline's _auto_resize: the preferred resolution nearest the reference's aspect ratio
    control_sizing=ControlSizing(
        "preferred", multiple=16, resolutions=KONTEXT_RESOLUTIONS, label="~1 MP preferred size"
    ),
)


def _pipeline_parts(latent_channels: int, vae_scale_factor: int) -> SimpleNamespace:
    """What FluxKontextPipeline.prepare_latents reads of its pipeline (no model is needed)."""
    from diffusers import FluxKontextPipeline

    return SimpleNamespace(
        vae_scale_factor=vae_scale_factor,
        latent_channels=latent_channels,
        _pack_latents=FluxKontextPipeline._pack_latents,
        _prepare_latent_image_ids=FluxKontextPipeline._prepare_latent_image_ids,
    )


class FluxKontextFamily(FluxFamily):
    spec = SPEC

    def predict(
        self,
        denoiser: Any,
        noisy: torch.Tensor,
        noise_level: torch.Tensor,
        cond: dict[str, Any],
        batch_info: Mapping[str, Any],
        cfg: TrainConfig,
    ) -> torch.Tensor:
        import torch
        from diffusers import FluxKontextPipeline

        b, c, h, w = noisy.shape
        dtype, device = noisy.dtype, noisy.device
        controls = batch_info.get("controls")  # [B, 1, C, hc, wc], a tuple of one [B, C, hc, wc], or None
        if controls is None:  # text-to-image: the pipeline with image=None runs FLUX.1's step
            return super().predict(denoiser, noisy, noise_level, cond, batch_info, cfg)
        reference = controls[0] if isinstance(controls, tuple) else controls[:, 0]  # [B, C, hc, wc]
        scale = self.spec.vae_scale_factor
        latents, reference, latent_ids, reference_ids = FluxKontextPipeline.prepare_latents(
            _pipeline_parts(c, scale),
            reference.to(device, dtype),  # [B, C, hc, wc]: latents, used as they are (their own ids)
            b,
            c,
            h * scale,
            w * scale,
            dtype,
            device,
            latents=pack_2x2(noisy),  # [B, hw/4, C*4]
        )  # reference [B, hc*wc/4, C*4]; ids [hw/4, 3], [hc*wc/4, 3] (the reference's first axis 1)
        embeds = cond["prompt_embeds"].to(device, dtype)  # [B, L, D]
        guidance = None
        if denoiser.config.guidance_embeds:
            guidance = torch.full(
                (b,), float(cfg.guidance if cfg.guidance is not None else 1.0), device=device
            )
        out = denoiser(
            hidden_states=torch.cat([latents, reference], dim=1),  # [B, hw/4 + hc*wc/4, C*4]
            timestep=noise_level.to(dtype),
            guidance=guidance,
            pooled_projections=cond["pooled"].to(device, dtype),
            encoder_hidden_states=embeds,
            txt_ids=torch.zeros(embeds.shape[1], 3, device=device, dtype=dtype),  # [L, 3]
            img_ids=torch.cat([latent_ids, reference_ids], dim=0),  # [hw/4 + hc*wc/4, 3]
            return_dict=False,
        )[0][:, : latents.shape[1]]  # [B, hw/4, C*4]: the target tokens
        return unpack_2x2(out, h, w)  # [B, C, h, w]


FAMILY = FluxKontextFamily()
