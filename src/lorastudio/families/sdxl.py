"""Stable Diffusion XL: a U-Net on 4-channel latents (DDPM objective: epsilon or v-prediction,
read from the scheduler config), conditioned on both CLIP encoders' penultimate hidden states
(concatenated) plus the second encoder's pooled output and the micro-conditioning time ids
(original size, crop offset, target size). The VAE stays in fp32 (it overflows in fp16)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.families.base import CaptionTokens, Family, FamilySpec
from lorastudio.families.common import no_grad
from lorastudio.families.config_rules import (
    Agrees,
    Shape,
    Value,
    autoencoder_shapes,
    embedding_shape,
    vae_rules,
)

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

SPEC = FamilySpec(
    name="sdxl",
    title="Stable Diffusion XL",
    caption_tokens=CaptionTokens("tokenizer", 77),  # both CLIPs read 77 tokens (the pipeline cuts the rest)
    pipeline_class="StableDiffusionXLPipeline",
    accepted_pipelines=("StableDiffusionXLPipeline", "StableDiffusionXLImg2ImgPipeline"),
    denoiser="unet",
    config_rules=(
        *vae_rules("unet", "latent_channels", "out_channels", 1, 4, "U-Net"),
        Agrees(  # the two CLIPs' hidden states are concatenated
            (Value("text_encoder", ("hidden_size",)), Value("text_encoder_2", ("hidden_size",))),
            Value("unet", ("cross_attention_dim",)),
            "text encoder",
        ),
        *autoencoder_shapes(),
        Shape("unet", ("conv_in.weight",), (None, (("in_channels",),)), "U-Net"),
        Shape("unet", ("conv_out.weight",), ((("out_channels",),),), "U-Net"),
        embedding_shape("text_encoder", ("token_embedding.weight",), ("hidden_size",)),
        embedding_shape("text_encoder_2", ("token_embedding.weight",), ("hidden_size",)),
    ),
    objective="ddpm",
    latent_channels=4,
    vae_scale_factor=8,
    resolution_multiple=32,
    lora_targets=("to_q", "to_k", "to_v", "to_out.0"),
    lora_layers_kwarg="unet_lora_layers",
    patch_size=1,
    denoiser_class="UNet2DConditionModel",
    vae_class="AutoencoderKL",
    vae_in_fp32=True,
    defaults={
        "resolution": 1024,
        "learning_rate": 1e-4,
        "lora_rank": 16,
        "snr_gamma": 5.0,
        # ComfyUI maps SDXL diffusers keys only in the old `processor.to_q` spelling, and
        # A1111/Forge read kohya names: the portable SDXL file is kohya's (README: LoRA files)
        "lora_format": "kohya",
    },
    supports=frozenset(
        {"snr_gamma", "noise_offset", "train_text_encoder", "text_encoder_lr", "v_prediction"}
    ),
    generation_defaults={"num_inference_steps": 30, "guidance_scale": 5.0},
    guidance="cfg",
    negative_prompt=True,
    # the attention blocks' parents and the convolutional glue between them (bench note 13)
    wide_compile_blocks=("Transformer2DModel", "ResnetBlock2D", "Downsample2D", "Upsample2D"),
    # self-attention q/k/v read the block's hidden states, cross-attention k/v the prompt's
    # embeddings (bench note 21: -3.7 % per step at batch 4 with compile wide + CUDA graphs)
    fused_projection_groups={
        "BasicTransformerBlock": (("attn1.to_q", "attn1.to_k", "attn1.to_v"), ("attn2.to_k", "attn2.to_v"))
    },
)


class SDXLFamily(Family):
    spec = SPEC

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        embeds, _, pooled, _ = encoders.encode_prompt(
            list(prompts), device=encoders.device, num_images_per_prompt=1, do_classifier_free_guidance=False
        )  # [N, 77, D1+D2] penultimate states of both encoders, [N, Dp] pooled of the second
        return [{"prompt_embeds": e.cpu(), "pooled": p.cpu()} for e, p in zip(embeds, pooled, strict=True)]

    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        return {
            "prompt_embeds": cond["prompt_embeds"].to(device, dtype),  # [1, 77, D1+D2]
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
        dtype, device = noisy.dtype, noisy.device
        return denoiser(
            noisy,  # [B, 4, h, w]
            noise_level.to(device),  # [B] integer timesteps
            encoder_hidden_states=cond["prompt_embeds"].to(device, dtype),  # [B, 77, D]
            added_cond_kwargs={
                "text_embeds": cond["pooled"].to(device, dtype),  # [B, Dp]
                "time_ids": time_ids(batch_info).to(device, dtype),  # [B, 6]
            },
            return_dict=False,
        )[0]


def time_ids(batch_info: Mapping[str, Any]) -> torch.Tensor:
    """SDXL micro-conditioning per sample: original (h, w), crop (top, left), target (H, W) -> [B, 6]."""
    import torch

    target = tuple(batch_info["target_size"])
    rows = [
        (*orig, *crop, *target)
        for orig, crop in zip(batch_info["original_size"], batch_info["crop_top_left"], strict=True)
    ]
    return torch.tensor(rows, dtype=torch.float32)


FAMILY = SDXLFamily()
