"""Tiny Krea 2 pipeline: the real Krea2Pipeline classes (a Qwen3-VL text encoder with the Qwen
tokenizer and its chat template, a Krea2Transformer2DModel with its text-fusion stage, the
Qwen-Image VAE, Krea 2's dynamic-shift scheduler), shrunk like tiny/models.py's builders. The
pipeline's own config carries the checkpoint facts the family reads: `text_encoder_select_layers`
(which hidden states are stacked), `patch_size` and `is_distilled`. Deterministic: see
tiny/parts.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lorastudio.tiny import tokenizers as toks
from lorastudio.tiny.parts import QWEN_VL_VISION, flow_scheduler, qwen_image_vae, qwen_vl_token_ids, seed_for

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

SELECT_LAYERS = (1, 2, 3)  # hidden states stacked per token (the real model taps 12 of Qwen3-VL-4B's)


def build_krea2(seed: int) -> DiffusionPipeline:
    """Krea 2 (base, not distilled): 3-layer Qwen3-VL, single-stream DiT (patch 2, 3 tapped
    text layers), 5-D Qwen-Image VAE with its real latent stats."""
    from diffusers import Krea2Pipeline, Krea2Transformer2DModel
    from transformers import Qwen3VLConfig, Qwen3VLModel

    tokenizer = toks.qwen_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in toks.QWEN_SPECIALS}
    special = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"]}
    config = Qwen3VLConfig(
        text_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 3,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 2048,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5e5,
                "mrope_section": [4, 2, 2],  # sums to head_dim / 2
                "mrope_interleaved": True,
            },
            "pad_token_id": tokenizer.pad_token_id,
            **special,
        },
        vision_config={**QWEN_VL_VISION, "deepstack_visual_indexes": [0]},
        **qwen_vl_token_ids(tokenizer),
    )
    seed_for(seed, "text_encoder")
    text_encoder = Qwen3VLModel(config)
    seed_for(seed, "transformer")
    transformer = Krea2Transformer2DModel(
        in_channels=64,  # 16 latent channels x patch 2 x 2
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        timestep_embed_dim=16,
        text_hidden_dim=32,  # Qwen3-VL hidden size
        num_text_layers=len(SELECT_LAYERS),
        text_num_attention_heads=2,
        text_num_key_value_heads=2,
        text_intermediate_size=64,
        num_layerwise_text_blocks=1,
        num_refiner_text_blocks=1,
        axes_dims_rope=(4, 6, 6),  # sums to the head dim
    )
    vae = qwen_image_vae(seed)
    scheduler = flow_scheduler(  # what Krea2Pipeline's docstring asks for
        shift=1.0, max_shift=1.15, max_image_seq_len=6400, time_shift_type="exponential"
    )
    return Krea2Pipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        text_encoder_select_layers=SELECT_LAYERS,
        is_distilled=False,
        patch_size=2,
    )
