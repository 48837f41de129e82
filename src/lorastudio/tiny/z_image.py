"""Tiny Z-Image: the single-stream ZImageTransformer2DModel with inputs for one forward, and the
ZImagePipeline builder (Qwen3 text encoder with its chat template, the FLUX.1 VAE).
Deterministic: see tiny/parts.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from lorastudio.tiny import tokenizers as toks
from lorastudio.tiny.parts import flux1_vae, qwen3_config, seed_for

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline


def z_image_transformer(seed: int) -> Any:
    """The tiny Z-Image ZImageTransformer2DModel of `build_z_image(seed)` (same weights)."""
    from diffusers import ZImageTransformer2DModel

    seed_for(seed, "transformer")
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,),
        all_f_patch_size=(1,),
        in_channels=16,
        dim=32,
        n_layers=2,
        n_refiner_layers=1,
        n_heads=2,
        n_kv_heads=2,
        norm_eps=1e-5,
        qk_norm=True,
        cap_feat_dim=32,  # Qwen3 hidden size
        rope_theta=256.0,
        t_scale=1000.0,
        axes_dims=[8, 4, 4],  # sums to the head dim
        axes_lens=[1536, 512, 512],
    )
    with torch.no_grad():  # allocated with torch.empty (garbage, maybe NaN); a checkpoint fills them
        transformer.x_pad_token.copy_(torch.randn_like(transformer.x_pad_token) * 0.02)
        transformer.cap_pad_token.copy_(torch.randn_like(transformer.cap_pad_token) * 0.02)
    return transformer


def z_image_transformer_inputs() -> dict[str, Any]:
    """Keyword inputs of `z_image_transformer` for one forward (seeded): two 8x8 latents, two
    captions of different lengths."""
    g = torch.Generator().manual_seed(1)
    return {
        "x": [torch.randn(16, 1, 8, 8, generator=g) for _ in range(2)],  # B x [C, F, h, w]
        "t": torch.tensor([0.3, 0.8]),
        "cap_feats": [torch.randn(5, 32, generator=g), torch.randn(9, 32, generator=g)],  # B x [L_i, D]
        "return_dict": False,
    }


def build_z_image(seed: int) -> DiffusionPipeline:
    """Z-Image: Qwen3 text encoder with its chat template, single-stream DiT, the FLUX.1 VAE."""
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline
    from transformers import Qwen3Model

    tokenizer = toks.qwen_tokenizer()
    seed_for(seed, "text_encoder")
    # 3 layers: the pipeline reads the second-to-last hidden state
    text_encoder = Qwen3Model(qwen3_config(tokenizer, hidden=32, layers=3, head_dim=16))
    transformer = z_image_transformer(seed)
    vae = flux1_vae(seed)
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False
    )
    return ZImagePipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=toks.qwen_tokenizer(),
        transformer=transformer,
    )
