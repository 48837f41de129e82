"""The tiny builders of every family (BUILDERS, `build`), and those of SDXL and FLUX.1.

Tiny random-weight pipelines of the real diffusers / transformers classes. The other families'
builders live in their own modules (tiny/qwen_image.py, z_image.py, flux2.py, chroma.py,
krea2.py, edit_models.py); the parts several share (seeding, VAEs, T5, FLUX.1 DiT sizes and
scheduler) in tiny/parts.py.

Each builder keeps the structure of the real model (UNet levels, 8x VAEs, latent channels,
packing, text encoders, schedulers with the real configs) and shrinks only widths and depths
(hidden sizes 16-64), so a training step at 32-64 px takes a few hundredths of a second on CPU.

Determinism: every component is initialised right after `torch.manual_seed` with a seed derived
from (seed, component name), inside `torch.random.fork_rng` so the caller's RNG state is left
as it was. The same seed gives byte-identical weights in any process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.tiny import flux2 as tiny_flux2
from lorastudio.tiny import tokenizers as toks
from lorastudio.tiny.chroma import build_chroma
from lorastudio.tiny.krea2 import build_krea2
from lorastudio.tiny.parts import (
    FLUX1_DIT,
    clip_text_config,
    flux1_scheduler,
    flux1_vae,
    kl_vae,
    seed_for,
    t5_encoder,
)
from lorastudio.tiny.qwen_image import build_qwen_image
from lorastudio.tiny.z_image import build_z_image

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline


def sdxl_unet(seed: int) -> Any:
    """The tiny SDXL UNet2DConditionModel of `build_sdxl(seed)` (same weights; built alone on the meta
    device by lora/onetrainer_names for its module names)."""
    from diffusers import UNet2DConditionModel

    seed_for(seed, "unet")
    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=2,
        block_out_channels=(16, 32, 32),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(1, 2, 2),  # SDXL's config names the number of heads this way
        transformer_layers_per_block=(1, 1, 2),
        use_linear_projection=True,
        cross_attention_dim=32 + 64,  # both encoders' penultimate states, concatenated
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + 32,  # 6 time ids x 8 + pooled projection
        norm_num_groups=8,
    )


def build_sdxl(seed: int) -> DiffusionPipeline:
    """SDXL: CLIP-L + OpenCLIP-bigG analogues, a 3-level UNet with text_time embeddings, 4-ch VAE."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    tokenizer = toks.clip_tokenizer()
    tokenizer_2 = toks.clip_tokenizer(pad_token="!")  # SDXL's second tokenizer pads with "!"
    seed_for(seed, "text_encoder")
    text_encoder = CLIPTextModel(clip_text_config(tokenizer, 32, 2, "quick_gelu", 32))
    seed_for(seed, "text_encoder_2")
    text_encoder_2 = CLIPTextModelWithProjection(clip_text_config(tokenizer_2, 64, 2, "gelu", 32))
    unet = sdxl_unet(seed)
    vae = kl_vae(seed, latent_channels=4, scaling=0.13025, shift=None, quant=True)
    scheduler = EulerDiscreteScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        prediction_type="epsilon",
        interpolation_type="linear",
        timestep_spacing="leading",
        steps_offset=1,
        use_karras_sigmas=False,
    )
    return StableDiffusionXLPipeline(
        vae=vae,
        text_encoder=text_encoder,
        text_encoder_2=text_encoder_2,
        tokenizer=tokenizer,
        tokenizer_2=tokenizer_2,
        unet=unet,
        scheduler=scheduler,
        force_zeros_for_empty_prompt=True,
        add_watermarker=False,
    )


def build_flux(seed: int) -> DiffusionPipeline:
    """FLUX.1-dev: CLIP (pooled) + T5 (sequence), MM-DiT with guidance embeddings, 16-ch VAE."""
    from diffusers import FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel

    tokenizer = toks.clip_tokenizer()
    tokenizer_2 = toks.t5_tokenizer()
    seed_for(seed, "text_encoder")
    text_encoder = CLIPTextModel(clip_text_config(tokenizer, 32, 2, "quick_gelu", 32))
    text_encoder_2 = t5_encoder(seed, tokenizer_2, "text_encoder_2")
    seed_for(seed, "transformer")
    transformer = FluxTransformer2DModel(
        **FLUX1_DIT,
        pooled_projection_dim=32,  # CLIP hidden size
        guidance_embeds=True,  # FLUX.1-dev is guidance-distilled
    )
    vae = flux1_vae(seed)
    scheduler = flux1_scheduler()
    return FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )


BUILDERS: dict[str, Callable[[int], DiffusionPipeline]] = {
    "sdxl": build_sdxl,
    "flux": build_flux,
    "qwen-image": build_qwen_image,
    "z-image": build_z_image,
    "flux2": tiny_flux2.build_flux2,
    "flux2-klein": tiny_flux2.build_flux2_klein,
    "chroma": build_chroma,
    "krea2": build_krea2,
}


def build(family: str, seed: int) -> DiffusionPipeline:
    """The tiny pipeline of `family` (a key of BUILDERS), every module in eval mode.

    The caller's torch RNG state is restored afterwards. Raises KeyError for an unknown family
    (the public API checks names first and raises UnknownFamily).
    """
    from lorastudio.tiny.edit_models import EDIT_BUILDERS  # built from the builders above

    builder = {**BUILDERS, **EDIT_BUILDERS}[family]
    with torch.random.fork_rng(devices=[]):
        pipe = builder(seed)
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()  # built from a config = train mode (dropout on); from_pretrained = eval
    return pipe
