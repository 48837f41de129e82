"""FLUX.1 (dev / schnell / Krea ...): rectified-flow transformer on 2x2-packed 16-channel
latents, CLIP pooled + T5 text conditioning, optional guidance embedding (guidance-distilled
bases). Conditioning is produced by FluxPipeline.encode_prompt, so it matches inference.

Deliberate choices (session 28 maths audit, tests/families/test_loss_reference.py): the guidance
embedding gets `guidance` 1.0 while training by default (ai-toolkit's; diffusers' FLUX.1
DreamBooth script defaults to 3.5, kohya's to its --guidance_scale; a run may set it); the
training sigmas are the sampled ones, unshifted, unless flow_shift is set (kohya's default; the
diffusers script's timesteps are the scheduler's unshifted ones too, as its config shifts
dynamically), where FluxPipeline shifts its inference sigmas by the image size."""

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
    name="flux",
    title="FLUX.1",
    pipeline_class="FluxPipeline",
    accepted_pipelines=("FluxPipeline", "FluxImg2ImgPipeline", "FluxInpaintPipeline"),
    denoiser="transformer",
    config_rules=(
        *vae_rules("transformer", "latent_channels", "in_channels", 2, 16, "transformer"),
        *shifted_vae("FluxPipeline"),
        Agrees(  # CLIP's pooled output
            (Value("text_encoder", ("hidden_size",)),),
            Value("transformer", ("pooled_projection_dim",)),
            "text encoder",
        ),
        Agrees(  # T5's hidden states
            (Value("text_encoder_2", ("d_model",)),),
            Value("transformer", ("joint_attention_dim",)),
            "text encoder",
        ),
        # each component's weights against its own config (basemodels/weight_shapes.py)
        *autoencoder_shapes(),
        projection_shape("transformer", "x_embedder.weight", HEADS, "in_channels"),
        projection_shape("transformer", "context_embedder.weight", HEADS, "joint_attention_dim"),
        embedding_shape("text_encoder", ("token_embedding.weight",), ("hidden_size",)),
        embedding_shape("text_encoder_2", ("shared.weight", "embed_tokens.weight"), ("d_model",)),
    ),
    objective="flow",
    latent_channels=16,
    vae_scale_factor=8,
    resolution_multiple=16,
    lora_targets=("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"),
    lora_layers_kwarg="transformer_lora_layers",
    patch_size=2,
    denoiser_class="FluxTransformer2DModel",
    vae_class="AutoencoderKL",
    defaults={
        "resolution": 1024,
        "learning_rate": 1e-4,
        "lora_rank": 16,
        "guidance": 1.0,
        "max_sequence_length": 512,
    },
    supports=frozenset(
        {"timestep_sampling", "logit_mean", "logit_std", "flow_shift", "guidance", "max_sequence_length"}
    ),
    generation_defaults={"num_inference_steps": 28, "guidance_scale": 3.5},
    guidance="embedded",
    fused_projection_groups={
        "FluxTransformerBlock": DUAL_STREAM_QKV,
        # the single blocks' MLP input projection reads the same normed states as q/k/v
        "FluxSingleTransformerBlock": (("proj_mlp", "attn.to_q", "attn.to_k", "attn.to_v"),),
    },
    max_sequence_length_max=512,  # T5's 512 tokens (FluxPipeline refuses more)
    caption_tokens=CaptionTokens("tokenizer_2"),  # T5 reads the caption (CLIP's 77: the pooled summary)
)


class FluxFamily(Packed2x2Latents, Family):
    spec = SPEC

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        embeds, pooled, _ = encoders.encode_prompt(
            prompts, prompt_2=None, device=encoders.device, max_sequence_length=cfg.max_sequence_length or 512
        )  # [N, L, D], [N, Dp]
        return [{"prompt_embeds": e.cpu(), "pooled": p.cpu()} for e, p in zip(embeds, pooled, strict=True)]

    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        return {
            "prompt_embeds": cond["prompt_embeds"].to(device, dtype),  # [1, L, D]
            "pooled_prompt_embeds": cond["pooled"].to(device, dtype),  # [1, Dp]
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
        from diffusers import FluxPipeline

        dtype, device = noisy.dtype, noisy.device
        guidance = None
        if denoiser.config.guidance_embeds:
            guidance = torch.full(
                (noisy.shape[0],), float(cfg.guidance if cfg.guidance is not None else 1.0), device=device
            )
        return flux_dit_predict(
            denoiser,
            FluxPipeline,
            noisy,
            cond["prompt_embeds"].to(device, dtype),  # [B, L, D]
            timestep=noise_level.to(dtype),
            guidance=guidance,
            pooled_projections=cond["pooled"].to(device, dtype),
        )  # [B, C, h, w]

    def shift_sigmas(
        self,
        sigmas: torch.Tensor,
        latent_hw: tuple[int, int],
        cfg: TrainConfig,
        scheduler_config: Mapping[str, Any],
    ) -> torch.Tensor:
        """FLUX.1 trains on the sampled sigmas as they are (logit-normal by default); a static
        cfg.flow_shift is the one option."""
        from lorastudio.families.shifts import static_shift

        return sigmas if cfg.flow_shift is None else static_shift(sigmas, cfg.flow_shift)


FAMILY = FluxFamily()
