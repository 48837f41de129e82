"""Stable Diffusion XL: a U-Net on 4-channel latents (DDPM objective: epsilon or v-prediction,
read from the scheduler config), conditioned on both CLIP encoders' penultimate hidden states
(concatenated) plus the second encoder's pooled output and the micro-conditioning time ids
(original size, crop offset, target size). The VAE stays in fp32 (it overflows in fp16).

Caption dropout trains on the encoding of "" (diffusers' SDXL scripts' proportion_empty_prompts,
kohya's), where StableDiffusionXLPipeline's unconditional pass without a negative prompt uses
zeros (force_zeros_for_empty_prompt): the peers' choice, kept (session 28 maths audit). A base
trained with the EDM objective (Playground v2.5) is refused: SDXLFamily.objective_problems."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.errors import FieldProblem
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
    from lorastudio.families.single_file import SingleFile

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
    no_max_sequence_length="SDXL's two CLIP text encoders read a fixed 77 tokens (no T5 or LLM encoder): "
    "it takes no max_sequence_length",
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

    def objective_problems(self, source: str | SingleFile, revision: str | None) -> list[FieldProblem]:
        """An SDXL-architecture base trained with another objective than SDXL's (Playground
        v2.5: an EDM scheduler, per-channel latents_mean / latents_std in its VAE config) is
        refused: this family trains DDPM (epsilon / v on alphas_cumprod) on latents scaled by
        scaling_factor only, so its LoRA would learn another noise schedule on latents its
        pipeline decodes otherwise (StableDiffusionXLPipeline un-normalises with the VAE's
        latents_mean / latents_std where they are set; diffusers' SDXL DreamBooth script trains
        such a base EDM-style). Read as plain JSON from disk (a folder, a single file's base
        config, a hub id's cached snapshot): no diffusers import, so the job service's
        validation asks too; nothing is said where the configs are not on disk or unreadable."""
        scheduler = _disk_config(source, revision, "scheduler/scheduler_config.json")
        vae = _disk_config(source, revision, "vae/config.json")
        problems = []
        if is_edm(scheduler):
            name = scheduler.get("_class_name") or "an EDM scheduler"
            problems.append(
                FieldProblem(
                    "base_model",
                    f"the base's scheduler is {name} (EDM, e.g. Playground v2.5): it was trained with the "
                    "EDM objective, and lorastudio trains SDXL's DDPM one (discrete timesteps on "
                    "alphas_cumprod), so its LoRA would be wrong at inference; choose an SDXL base with a "
                    "DDPM-family scheduler",
                )
            )
        if vae.get("latents_mean") is not None and vae.get("latents_std") is not None:
            problems.append(
                FieldProblem(
                    "base_model",
                    "the base's VAE config sets latents_mean / latents_std (e.g. Playground v2.5): its "
                    "pipeline normalises the latents per channel, and lorastudio's SDXL trains on latents "
                    "scaled by scaling_factor only, so its LoRA would be wrong at inference",
                )
            )
        return problems

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


def _disk_config(source: str | SingleFile, revision: str | None, name: str) -> dict[str, Any]:
    """The JSON object at `name` in the base's folder on disk ({} when it is not there or not
    an object): a pipeline folder, a single file's base config, a hub id's cached snapshot."""
    from pathlib import Path

    from lorastudio import json_read
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id
    from lorastudio.families.single_file import config_of

    where = str(config_of(source))
    folder: Path | None = Path(where).expanduser()
    if not folder.is_dir():
        folder = cached_snapshot(where, revision) if is_hub_id(where) else None
    if folder is None:
        return {}
    try:
        found = json_read.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def is_edm(scheduler_config: Mapping[str, Any]) -> bool:
    """Whether a scheduler config is an EDM scheduler's (EDMEulerScheduler,
    EDMDPMSolverMultistepScheduler: continuous sigmas with `sigma_data`), not a DDPM-family one."""
    return (
        str(scheduler_config.get("_class_name") or "").startswith("EDM") or "sigma_data" in scheduler_config
    )


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
