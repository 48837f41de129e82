"""Tiny Chroma pipeline: the real ChromaPipeline classes (T5 encoder with its tokenizer, a
ChromaTransformer2DModel with its approximator, the FLUX.1 VAE, FLUX.1's scheduler config),
shrunk like the FLUX.1 builder in tiny/models.py. Deterministic: see tiny/models.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lorastudio.tiny import tokenizers as toks

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline


def t5_encoder(seed: int, tokenizer: object) -> object:
    """A 2-layer T5EncoderModel (d_model 32) for `tokenizer` (tiny/tokenizers.t5_tokenizer)."""
    from transformers import T5Config, T5EncoderModel

    from lorastudio.tiny.models import _seed_for

    _seed_for(seed, "text_encoder")
    return T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer),  # type: ignore[arg-type]
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
            pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
            eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
            decoder_start_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
        )
    )


def build_chroma(seed: int) -> DiffusionPipeline:
    """Chroma (Chroma1-HD layout): T5 only (no CLIP), MM-DiT whose modulations come from the
    distilled-guidance approximator, 16-channel FLUX.1 VAE, dynamic-shift flow scheduler."""
    from diffusers import ChromaPipeline, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler

    from lorastudio.tiny.models import _kl_vae, _seed_for

    tokenizer = toks.t5_tokenizer()
    text_encoder = t5_encoder(seed, tokenizer)
    _seed_for(seed, "transformer")
    transformer = ChromaTransformer2DModel(
        patch_size=1,
        in_channels=64,  # 16 latent channels packed 2x2
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,  # T5 d_model
        axes_dims_rope=(4, 6, 6),  # sums to the head dim
        approximator_num_channels=16,  # time (4) + guidance (4) + modulation index (8)
        approximator_hidden_dim=32,
        approximator_layers=2,
    )
    vae = _kl_vae(seed, latent_channels=16, scaling=0.3611, shift=0.1159, quant=False)
    scheduler = FlowMatchEulerDiscreteScheduler(  # Chroma1-HD ships FLUX.1's scheduler config
        num_train_timesteps=1000,
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    return ChromaPipeline(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer
    )
