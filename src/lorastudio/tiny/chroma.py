"""Tiny Chroma pipeline: the real ChromaPipeline classes (T5 encoder with its tokenizer, a
ChromaTransformer2DModel with its approximator, the FLUX.1 VAE, FLUX.1's scheduler config),
shrunk like the FLUX.1 builder in tiny/models.py, with which it shares its parts (tiny/parts.py:
the T5 encoder, DiT sizes, VAE and scheduler). Deterministic: see tiny/parts.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lorastudio.tiny import tokenizers as toks
from lorastudio.tiny.parts import FLUX1_DIT, flux1_scheduler, flux1_vae, seed_for, t5_encoder

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline


def build_chroma(seed: int) -> DiffusionPipeline:
    """Chroma (Chroma1-HD layout): T5 only (no CLIP), MM-DiT whose modulations come from the
    distilled-guidance approximator, 16-channel FLUX.1 VAE, dynamic-shift flow scheduler."""
    from diffusers import ChromaPipeline, ChromaTransformer2DModel

    tokenizer = toks.t5_tokenizer()
    text_encoder = t5_encoder(seed, tokenizer, "text_encoder")
    seed_for(seed, "transformer")
    transformer = ChromaTransformer2DModel(
        **FLUX1_DIT,
        approximator_num_channels=16,  # time (4) + guidance (4) + modulation index (8)
        approximator_hidden_dim=32,
        approximator_layers=2,
    )
    vae = flux1_vae(seed)
    scheduler = flux1_scheduler()  # Chroma1-HD ships FLUX.1's scheduler config
    return ChromaPipeline(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer
    )
