"""Tiny FLUX.2 pipelines: FLUX.2 [dev] (Flux2Pipeline) and FLUX.2 [klein] (Flux2KleinPipeline).

Real classes, tiny configs: Flux2Transformer2DModel (dual + single stream blocks, 4-axis RoPE),
AutoencoderKLFlux2 (32 latent channels, 2x2 patchified to 128 and normalised by its BatchNorm
running statistics, which are random here so the normalisation is exercised),
Mistral3ForConditionalGeneration (dev) / Qwen3ForCausalLM (klein) with enough layers that the
pipelines' hidden-state picks (10, 20, 30) / (9, 18, 27) exist.

The dev tokenizer: the real checkpoint's `tokenizer` is a PixtralProcessor, which transformers
builds only with torchvision installed; for text the processor renders its tokenizer's chat
template and tokenizes the result, so the tiny model ships the tokenizer itself (a
PreTrainedTokenizerFast, byte-level BPE) with a Mistral-style chat template: the pipeline's
`tokenizer.apply_chat_template(...)` call runs the same way on it. The pipeline's long system
message is one added token here, so a prompt fits in the 16-token sequences the tests use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from lorastudio.tiny import tokenizers as toks
from lorastudio.tiny.parts import flow_scheduler, qwen3_config, seed_for

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

DEV_LAYERS = 30  # Flux2Pipeline reads hidden states 10, 20, 30
KLEIN_LAYERS = 27  # Flux2KleinPipeline reads hidden states 9, 18, 27
TEXT_HIDDEN = 16  # both tiny text encoders; the transformer's joint_attention_dim is 3x this
# the default init of the shared modulation linears gives gates of ~0.04 (every block nearly off,
# a LoRA learns at a crawl); scaled by this they are O(1), as in a trained checkpoint
MODULATION_GAIN = 30.0
MISTRAL_SPECIALS = (
    "<unk>",
    "<s>",
    "</s>",
    "<pad>",
    "[INST]",
    "[/INST]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
)
# Mistral-Small-3.1's chat layout for text turns: <s>[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]
MISTRAL_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set text = message['content'] %}"
    "{%- else %}{%- set text = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') %}{%- endif %}"
    "{%- if message['role'] == 'system' %}{{ '[SYSTEM_PROMPT]' + text + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' %}{{ '[INST]' + text + '[/INST]' }}"
    "{%- else %}{{ text + eos_token }}{%- endif %}"
    "{%- endfor %}"
)


def mistral_tokenizer() -> Any:
    """A tiny byte-level BPE PreTrainedTokenizerFast with Mistral's special tokens and chat layout."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab, merges = toks._qwen_vocab_merges()  # the same deterministic byte-level BPE as Qwen's
    backend = Tokenizer(models.BPE(vocab=dict(vocab), merges=list(merges)))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=toks.QWEN_MAX_LENGTH,
        chat_template=MISTRAL_CHAT_TEMPLATE,
    )
    for token in MISTRAL_SPECIALS:  # one at a time so the ids follow the listed order
        tok.add_tokens([AddedToken(token, special=True, normalized=False)], special_tokens=True)
    tok.add_tokens([AddedToken(SYSTEM_MESSAGE, special=False, normalized=False)])
    return tok


def _transformer(seed: int, guidance_embeds: bool) -> Any:
    from diffusers import Flux2Transformer2DModel

    seed_for(seed, "transformer")
    transformer = Flux2Transformer2DModel(
        patch_size=1,
        in_channels=128,  # 32 VAE channels patchified 2x2
        num_layers=1,
        num_single_layers=2,
        attention_head_dim=32,
        num_attention_heads=4,  # inner dim 128: as wide as the 128 latent channels it predicts
        joint_attention_dim=3 * TEXT_HIDDEN,  # three stacked hidden states
        timestep_guidance_channels=32,
        mlp_ratio=2.0,
        axes_dims_rope=(8, 8, 8, 8),  # sums to the head dim
        guidance_embeds=guidance_embeds,
    )
    with torch.no_grad():
        for mod in (
            transformer.double_stream_modulation_img,
            transformer.double_stream_modulation_txt,
            transformer.single_stream_modulation,
        ):
            mod.linear.weight.mul_(MODULATION_GAIN)
    return transformer


def _vae(seed: int) -> Any:
    from diffusers import AutoencoderKLFlux2

    seed_for(seed, "vae")
    vae = AutoencoderKLFlux2(
        block_out_channels=(16, 16, 32, 32),
        layers_per_block=1,
        norm_num_groups=8,
        latent_channels=32,
        sample_size=64,
    )
    with torch.no_grad():  # a real checkpoint ships its latent statistics: make them non-trivial
        vae.bn.running_mean.copy_(torch.randn_like(vae.bn.running_mean) * 0.1)
        vae.bn.running_var.copy_(torch.rand_like(vae.bn.running_var) + 0.5)
    return vae


def _scheduler() -> Any:
    # FLUX.2's scheduler config (the pipeline computes its own mu per call)
    return flow_scheduler(shift=3.0, max_shift=1.15, max_image_seq_len=4096, time_shift_type="exponential")


def build_flux2(seed: int) -> DiffusionPipeline:
    """FLUX.2 [dev]: Mistral3 text encoder, guidance-embedding transformer, the FLUX.2 VAE."""
    from diffusers import Flux2Pipeline
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    tokenizer = mistral_tokenizer()
    config = Mistral3Config(
        text_config={
            "model_type": "mistral",
            "hidden_size": TEXT_HIDDEN,
            "intermediate_size": 32,
            "num_hidden_layers": DEV_LAYERS,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 8,
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 2048,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "model_type": "pixtral",
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "head_dim": 8,
            "image_size": 28,
            "patch_size": 14,
        },
        image_token_index=tokenizer.unk_token_id,
        spatial_merge_size=2,
    )
    seed_for(seed, "text_encoder")
    text_encoder = Mistral3ForConditionalGeneration(config)
    return Flux2Pipeline(
        scheduler=_scheduler(),
        vae=_vae(seed),
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=_transformer(seed, guidance_embeds=True),
    )


def build_flux2_klein(seed: int) -> DiffusionPipeline:
    """FLUX.2 [klein] base (not distilled): Qwen3 causal LM, no guidance embedding (real CFG)."""
    from diffusers import Flux2KleinPipeline
    from transformers import Qwen3ForCausalLM

    tokenizer = toks.qwen_tokenizer()
    seed_for(seed, "text_encoder")
    text_encoder = Qwen3ForCausalLM(
        qwen3_config(tokenizer, hidden=TEXT_HIDDEN, layers=KLEIN_LAYERS, head_dim=8)
    )
    return Flux2KleinPipeline(
        scheduler=_scheduler(),
        vae=_vae(seed),
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=_transformer(seed, guidance_embeds=False),
        is_distilled=False,
    )
