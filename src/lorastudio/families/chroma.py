"""Chroma (Chroma1-HD / Base): a FLUX.1-schnell-derived rectified-flow transformer on 2x2-packed
16-channel latents, conditioned on T5 alone (no CLIP, no pooled vector: the per-block
modulations come from a small "distilled guidance" approximator fed with the time only). Unlike
FLUX.1, T5 runs with its attention mask and the transformer gets a text mask: every token up to
and including the first padding token counts, the rest are masked. That mask is the one
ChromaPipeline builds (a 0/1 float mask, which diffusers' attention adds to the logits), so
training sees exactly what inference sees (dropping the masked tokens would not: they keep their
unbiased logits). Flash attention cannot take such a mask and cuDNN's crashed on it (bench note
24): spec.masked_attention keeps "auto" on the efficient kernel and spec.refused_attention refuses
"cudnn" (served to the web form by /api/info). Guidance is real classifier-free guidance with a
negative prompt (no guidance embedding): `guidance` is refused, previews guide like inference.

diffusers 0.42.1's ChromaTransformer2DModel calls its single blocks without the text mask on its
gradient-checkpointed path; adapt_denoiser gives the mask back (tests/families/
test_checkpointed_predict.py checks a checkpointed step equals a plain one for every family).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.families.base import CaptionTokens, Family, FamilySpec
from lorastudio.families.common import DUAL_STREAM_QKV, Packed2x2Latents, flux_dit_predict, no_grad
from lorastudio.families.config_rules import (
    HEADS,
    Agrees,
    Value,
    autoencoder_shapes,
    embedding_shape,
    projection_shape,
    shifted_vae,
    vae_rules,
)

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

SPEC = FamilySpec(
    name="chroma",
    title="Chroma",
    pipeline_class="ChromaPipeline",
    accepted_pipelines=("ChromaPipeline", "ChromaImg2ImgPipeline", "ChromaInpaintPipeline"),
    denoiser="transformer",
    config_rules=(
        *vae_rules("transformer", "latent_channels", "in_channels", 2, 16, "transformer"),
        *shifted_vae("ChromaPipeline"),
        Agrees(  # T5's hidden states
            (Value("text_encoder", ("d_model",)),),
            Value("transformer", ("joint_attention_dim",)),
            "text encoder",
        ),
        *autoencoder_shapes(),
        projection_shape("transformer", "x_embedder.weight", HEADS, "in_channels"),
        projection_shape("transformer", "context_embedder.weight", HEADS, "joint_attention_dim"),
        embedding_shape("text_encoder", ("shared.weight", "embed_tokens.weight"), ("d_model",)),
    ),
    objective="flow",
    latent_channels=16,
    vae_scale_factor=8,
    resolution_multiple=16,
    lora_targets=("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"),
    lora_layers_kwarg="transformer_lora_layers",
    patch_size=2,
    denoiser_class="ChromaTransformer2DModel",
    vae_class="AutoencoderKL",
    # ai-toolkit config/examples/train_lora_chroma_24gb.yaml: LoRA linear 16 / alpha 16, lr 1e-4,
    # 2000 steps ("500 - 4000 is a good range"), 1024 px top bucket, flowmatch with ai-toolkit's
    # default timestep_type "sigmoid"; T5 at Chroma's 512 tokens (ChromaPipeline's default)
    defaults={
        "resolution": 1024,
        "learning_rate": 1e-4,
        "lora_rank": 16,
        "steps": 2000,
        "timestep_sampling": "sigmoid",
        "max_sequence_length": 512,
    },
    supports=frozenset({"timestep_sampling", "logit_mean", "logit_std", "flow_shift", "max_sequence_length"}),
    # Chroma1-HD's model card: CFG 4.0, 40 steps, empty negative prompt
    generation_defaults={"num_inference_steps": 40, "guidance_scale": 4.0},
    guidance="cfg",
    negative_prompt=True,
    fused_projection_groups={
        "ChromaTransformerBlock": DUAL_STREAM_QKV,
        "ChromaSingleTransformerBlock": (("proj_mlp", "attn.to_q", "attn.to_k", "attn.to_v"),),
    },
    no_cfg_kwargs={"guidance_scale": 1.0},  # ChromaPipeline guides when guidance_scale > 1
    guides_with_negative=True,
    masked_attention=True,  # the text mask reaches every joint attention call (see the docstring)
    refused_attention={
        "cudnn": "Chroma's text mask reaches every attention call and cuDNN's attention crashed on "
        "it (illegal memory access on an H200); use 'auto' (the efficient kernel)"
    },
    max_sequence_length_max=512,  # T5's 512 tokens
    caption_tokens=CaptionTokens("tokenizer"),  # its one text encoder, T5
)


class ChromaFamily(Packed2x2Latents, Family):
    spec = SPEC

    def adapt_denoiser(self, denoiser: Any) -> None:
        """Hand the single blocks the model's attention mask when its checkpointed path calls
        them without it (block(hidden, temb, rope): diffusers 0.42.1). The model's forward
        notes its mask while checkpointing; a single block called without one takes it."""
        import torch

        if getattr(denoiser, "_lorastudio_single_mask", False):
            return
        denoiser._lorastudio_single_mask = True
        blocks = list(denoiser.single_transformer_blocks)

        def note(model: Any, args: tuple, kwargs: dict) -> None:
            checkpointing = torch.is_grad_enabled() and model.gradient_checkpointing
            for block in blocks:
                block._lorastudio_text_mask = kwargs.get("attention_mask") if checkpointing else None

        def give(block: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
            mask = getattr(block, "_lorastudio_text_mask", None)
            if mask is None or len(args) > 3 or kwargs.get("attention_mask") is not None:
                return None
            return args, {**kwargs, "attention_mask": mask}

        denoiser.register_forward_pre_hook(note, with_kwargs=True)
        for block in blocks:
            block.register_forward_pre_hook(give, with_kwargs=True)

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        embeds, _, mask, *_ = encoders.encode_prompt(
            list(prompts),
            device=encoders.device,
            do_classifier_free_guidance=False,
            max_sequence_length=cfg.max_sequence_length or 512,
        )  # [N, L, D] (padded to L), [N, L] 0/1 float
        return [{"prompt_embeds": e.cpu(), "prompt_mask": m.cpu()} for e, m in zip(embeds, mask, strict=True)]

    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        return {
            "prompt_embeds": cond["prompt_embeds"].to(device, dtype),  # [1, L, D]
            "prompt_attention_mask": cond["prompt_mask"].to(device, dtype),  # [1, L]
        }

    def pipeline_negative_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        return {
            "negative_prompt_embeds": cond["prompt_embeds"].to(device, dtype),  # [1, L, D]
            "negative_prompt_attention_mask": cond["prompt_mask"].to(device, dtype),  # [1, L]
        }

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
        from diffusers import ChromaPipeline

        b, _, h, w = noisy.shape
        dtype, device = noisy.dtype, noisy.device
        # the pipeline's joint mask: the text mask, then every image token (a float 0/1 mask)
        image_mask = torch.ones(b, (h // 2) * (w // 2), device=device, dtype=torch.bool)  # [B, hw/4]
        mask = torch.cat([cond["prompt_mask"].to(device, dtype), image_mask], dim=1)  # [B, L + hw/4]
        return flux_dit_predict(
            denoiser,
            ChromaPipeline,
            noisy,
            cond["prompt_embeds"].to(device, dtype),  # [B, L, D]
            timestep=noise_level.to(dtype),  # sigma: the pipeline passes t / 1000
            attention_mask=mask,
        )  # [B, C, h, w]


FAMILY = ChromaFamily()
