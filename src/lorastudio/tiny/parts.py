"""Parts the tiny builders share: the per-component seeding, the 8x KL VAE, the CLIP text config,
and the FLUX.1 pieces (T5 encoder, VAE, DiT sizes, scheduler) that FLUX.1 and Chroma both use.

Determinism: every builder seeds a component with `seed_for(seed, name)` right before creating
it; `tiny.models.build` runs builders inside `torch.random.fork_rng`, so the caller's RNG state
is left as it was and the same seed gives byte-identical weights in any process.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.tiny import tokenizers as toks

if TYPE_CHECKING:
    from transformers import CLIPTokenizer

# The FLUX.1-style MM-DiT sizes shared by the tiny FLUX.1 and Chroma transformers.
FLUX1_DIT: dict[str, Any] = {
    "patch_size": 1,
    "in_channels": 64,  # 16 latent channels packed 2x2
    "num_layers": 1,
    "num_single_layers": 2,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": 32,  # T5 d_model
    "axes_dims_rope": (4, 6, 6),  # sums to the head dim
}

# The one-layer vision tower of the tiny Qwen VL text encoders (Qwen2.5-VL, Qwen3-VL), 32 wide out.
QWEN_VL_VISION: dict[str, Any] = {
    "depth": 1,
    "hidden_size": 16,
    "intermediate_size": 16,
    "num_heads": 2,
    "out_hidden_size": 32,
}


def seed_for(seed: int, component: str) -> None:
    """Seed torch's global CPU generator for one component (stable across processes)."""
    torch.manual_seed((seed * 1_000_003 + zlib.crc32(component.encode())) % (2**63))


def kl_vae(seed: int, latent_channels: int, scaling: float, shift: float | None, quant: bool) -> Any:
    """A 4-level (8x) AutoencoderKL like the SDXL / FLUX.1 VAEs, 16-32 channels wide."""
    from diffusers import AutoencoderKL

    seed_for(seed, "vae")
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[16, 16, 32, 32],
        layers_per_block=1,
        norm_num_groups=8,
        latent_channels=latent_channels,
        sample_size=64,
        scaling_factor=scaling,
        shift_factor=shift,
        use_quant_conv=quant,
        use_post_quant_conv=quant,
        force_upcast=True,
    )


def flux1_vae(seed: int) -> Any:
    """The 16-channel FLUX.1 VAE (its real scaling and shift), used by FLUX.1, Chroma and Z-Image."""
    return kl_vae(seed, latent_channels=16, scaling=0.3611, shift=0.1159, quant=False)


def clip_text_config(tok: CLIPTokenizer, hidden: int, layers: int, act: str, projection: int) -> Any:
    """A CLIPTextConfig of `layers` layers, `hidden` wide, over the tiny CLIP tokenizer `tok`."""
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_attention_heads=4,
        num_hidden_layers=layers,
        max_position_embeddings=toks.CLIP_MAX_LENGTH,
        hidden_act=act,
        projection_dim=projection,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def t5_encoder(seed: int, tokenizer: Any, component: str) -> Any:
    """A 2-layer T5EncoderModel (d_model 32) for `tokenizer` (tiny/tokenizers.t5_tokenizer),
    seeded as `component` ("text_encoder_2" in FLUX.1, "text_encoder" in Chroma)."""
    from transformers import T5Config, T5EncoderModel

    seed_for(seed, component)
    return T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer),
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            feed_forward_proj="gated-gelu",
            is_encoder_decoder=False,
            use_cache=False,
            tie_word_embeddings=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
    )


def flow_scheduler(shift: float, max_shift: float, max_image_seq_len: int, **extra: Any) -> Any:
    """A dynamic-shift FlowMatchEulerDiscreteScheduler (base shift 0.5 at 256 image tokens, the
    FLUX.1 line) with the family's own `shift`, `max_shift`, `max_image_seq_len` and `extra` keys."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000,
        shift=shift,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=max_shift,
        base_image_seq_len=256,
        max_image_seq_len=max_image_seq_len,
        **extra,
    )


def flux1_scheduler() -> Any:
    """FLUX.1's scheduler config (Chroma1-HD ships the same one)."""
    return flow_scheduler(shift=3.0, max_shift=1.15, max_image_seq_len=4096)


def qwen_image_vae(seed: int) -> Any:
    """The 5-D Qwen-Image VAE (16 latent channels, its real latent mean / std defaults), used by
    Qwen-Image and Krea 2."""
    from diffusers import AutoencoderKLQwenImage

    seed_for(seed, "vae")
    return AutoencoderKLQwenImage(  # latents_mean / latents_std: the real defaults
        base_dim=16,
        z_dim=16,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
    )


def qwen3_config(tokenizer: Any, hidden: int, layers: int, head_dim: int) -> Any:
    """A Qwen3Config (2 heads, 1 KV head, MLP 2x `hidden`, tied embeddings) over the tiny Qwen
    tokenizer: Z-Image's and FLUX.2 [klein]'s text encoders."""
    from transformers import Qwen3Config

    return Qwen3Config(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=head_dim,
        vocab_size=len(tokenizer),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )


def qwen_vl_token_ids(tokenizer: Any) -> dict[str, int]:
    """The image / video / vision-span token ids of a Qwen VL config over the tiny Qwen tokenizer."""
    names = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    }
    return {key: tokenizer.convert_tokens_to_ids(token) for key, token in names.items()}
