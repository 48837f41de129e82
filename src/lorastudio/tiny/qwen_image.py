"""Tiny Qwen-Image: the Qwen2.5-VL text encoder config (also the tiny captioner's), the MM-DiT
(patch 2) with inputs for one forward, and the QwenImagePipeline builder. Deterministic: see
tiny/parts.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from lorastudio.tiny import tokenizers as toks
from lorastudio.tiny.parts import QWEN_VL_VISION, flow_scheduler, qwen_image_vae, qwen_vl_token_ids, seed_for

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline


def qwen_image_transformer(seed: int) -> Any:
    """The tiny Qwen-Image QwenImageTransformer2DModel of `build_qwen_image(seed)` (same weights)."""
    from diffusers import QwenImageTransformer2DModel

    seed_for(seed, "transformer")
    return QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=64,
        out_channels=16,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,  # Qwen2.5-VL hidden size
        guidance_embeds=False,
        axes_dims_rope=(4, 6, 6),
    )


def qwen_image_transformer_inputs(batch: int = 2, side: int = 4, text: int = 7) -> dict[str, Any]:
    """Keyword inputs of `qwen_image_transformer` for one forward (seeded): `batch` images of
    side x side packed tokens and `text` text tokens."""
    g = torch.Generator().manual_seed(1)
    return {
        "hidden_states": torch.randn(batch, side * side, 64, generator=g),  # [B, tokens, 4 x 16]
        "encoder_hidden_states": torch.randn(batch, text, 32, generator=g),  # [B, T, D]
        "timestep": torch.tensor([0.3, 0.8])[:batch],
        "img_shapes": [[(1, side, side)]] * batch,
    }


def qwen_vl_config() -> Any:
    """The tiny Qwen2.5-VL (Qwen-Image's text encoder, the tiny captioner) over the tiny Qwen tokenizer."""
    from transformers import Qwen2_5_VLConfig

    tokenizer = toks.qwen_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in toks.QWEN_SPECIALS}
    special_ids = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": tokenizer.pad_token_id,
    }
    return Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 2048,
            "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6},
            **special_ids,
        },
        vision_config=dict(QWEN_VL_VISION),
        **qwen_vl_token_ids(tokenizer),
        vision_token_id=ids["<|vision_pad|>"],
        **special_ids,
    )


def build_qwen_image(seed: int) -> DiffusionPipeline:
    """Qwen-Image: Qwen2.5-VL text encoder, MM-DiT (patch 2), 5-D Qwen VAE with its real latent stats."""
    from diffusers import QwenImagePipeline
    from transformers import Qwen2_5_VLForConditionalGeneration

    config = qwen_vl_config()
    seed_for(seed, "text_encoder")
    text_encoder = Qwen2_5_VLForConditionalGeneration(config)
    transformer = qwen_image_transformer(seed)
    vae = qwen_image_vae(seed)
    scheduler = flow_scheduler(
        shift=1.0, max_shift=0.9, max_image_seq_len=8192, shift_terminal=0.02, time_shift_type="exponential"
    )
    return QwenImagePipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=toks.qwen_tokenizer(),
        transformer=transformer,
    )
