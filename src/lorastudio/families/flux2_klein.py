"""FLUX.2 [klein] (4B, 9B; base and step-distilled): the FLUX.2 transformer without a guidance
embedding, Qwen3 text features (hidden states 9, 18 and 27 stacked per token), the FLUX.2 VAE.
Latents, predict (with reference images) and time shift are FLUX.2's (families/flux2.py);
conditioning comes from Flux2KleinPipeline.encode_prompt.

Flavours are rows of SPEC.variants, read from the checkpoint: `is_distilled` from
model_index.json (what Flux2KleinPipeline registers and reads: a distilled checkpoint ignores
guidance), the size from the transformer config (4B: 5 dual-stream blocks, 9B: 8). Base
checkpoints render with real classifier-free guidance on the empty prompt: the spec says
guides_with_negative, so sample previews get the cached features of "" through
pipeline_negative_kwargs and run the pipeline's CFG without its text encoder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lorastudio.families.base import CaptionTokens, FamilySpec, Variant
from lorastudio.families.common import no_grad
from lorastudio.families.config_rules import qwen3_shape
from lorastudio.families.flux2 import (
    FLUX2_SUPPORTS,
    FLUX2_TARGETS,
    MAX_REFERENCES_KLEIN,
    MAX_TEXT_TOKENS,
    Flux2Family,
)
from lorastudio.families.flux2 import SPEC as FLUX2_SPEC

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

DISTILLED = {"num_inference_steps": 4, "guidance_scale": 1.0}  # BFL: 4 steps, no CFG
DISTILLED_NOTE = (
    "this is a step-distilled FLUX.2 klein checkpoint (model_index is_distilled = true): it renders "
    "in ~4 steps without guidance, and LoRA training on it undoes part of that distillation (samples "
    "grow soft or need more steps as training goes on). BFL and the trainers train on the base "
    "checkpoint (FLUX.2-klein-base-*) and apply the LoRA to the distilled one."
)


def _rows(size: str, layers: int) -> tuple[Variant, ...]:
    return (
        Variant(
            f"klein-{size}-distilled",
            f"FLUX.2 klein {size.upper()} (step-distilled)",
            {"is_distilled": True, "transformer.num_layers": layers},
            DISTILLED,
            DISTILLED_NOTE,
        ),
        Variant(
            f"klein-{size}-base",
            f"FLUX.2 klein {size.upper()} base",
            {"is_distilled": False, "transformer.num_layers": layers},
        ),
    )


SPEC = FamilySpec(
    name="flux2-klein",
    title="FLUX.2 klein",
    pipeline_class="Flux2KleinPipeline",
    accepted_pipelines=("Flux2KleinPipeline",),
    denoiser="transformer",
    # Qwen3's hidden size x 3 stacked layers; its weights a Qwen3's (a query norm per head)
    config_rules=(*FLUX2_SPEC.config_rules, qwen3_shape()),
    objective="flow",
    latent_channels=128,
    vae_scale_factor=16,
    resolution_multiple=16,
    lora_targets=FLUX2_TARGETS,
    lora_layers_kwarg="transformer_lora_layers",
    patch_size=1,
    denoiser_class="Flux2Transformer2DModel",
    vae_class="AutoencoderKLFlux2",
    # lr 1e-4, rank 32: DiffSynth-Studio's FLUX.2-klein-base-4B LoRA recipe
    # (examples/flux2/model_training/lora/FLUX.2-klein-base-4B.sh); timesteps as FLUX.2 dev
    defaults={
        # ComfyUI maps FLUX.2 LoRAs by their BFL names only (no diffusers-key table for it);
        # diffusers' FLUX.2 loader reads the same kohya/BFL file: the portable default
        "lora_format": "kohya",
        "resolution": 1024,
        "learning_rate": 1e-4,
        "lora_rank": 32,
        "max_sequence_length": MAX_TEXT_TOKENS,
    },
    supports=FLUX2_SUPPORTS,  # no guidance embedding: `guidance` is refused
    # a base checkpoint: Flux2KleinPipeline's documented call (50 steps, CFG 4); distilled: DISTILLED
    generation_defaults={"num_inference_steps": 50, "guidance_scale": 4.0},
    guidance="cfg",
    distilled_runs_no_cfg=True,  # Flux2KleinPipeline: CFG only when `not is_distilled`
    fused_projection_groups=FLUX2_SPEC.fused_projection_groups,
    no_cfg_kwargs={"guidance_scale": 1.0},
    max_sequence_length_max=MAX_TEXT_TOKENS,
    # Qwen3's chat template (thinking off) wraps the caption; all of it counts against the limit
    caption_tokens=CaptionTokens("tokenizer", template="chat"),
    control_images=(0, MAX_REFERENCES_KLEIN),  # text-to-image, or edit with 1..4 references
    min_reference_side=FLUX2_SPEC.min_reference_side,
    control_sizing=FLUX2_SPEC.control_sizing,  # Flux2KleinPipeline sizes references as Flux2Pipeline
    guides_with_negative=True,  # base checkpoints: real CFG on "" (distilled ones: guidance 1, unused)
    variants=(
        *_rows("4b", 5),
        *_rows("9b", 8),
        Variant(
            "klein-distilled",
            "FLUX.2 klein (step-distilled)",
            {"is_distilled": True},
            DISTILLED,
            DISTILLED_NOTE,
        ),
        Variant("klein-base", "FLUX.2 klein base", {}),  # no flag: the pipeline's default, not distilled
    ),
)


class Flux2KleinFamily(Flux2Family):
    spec = SPEC

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        length = cfg.max_sequence_length or MAX_TEXT_TOKENS
        embeds, _ = encoders.encode_prompt(
            list(prompts), device=encoders.device, max_sequence_length=length
        )  # [N, L, 3*D]
        return [{"prompt_embeds": e.cpu()} for e in embeds]

    def pipeline_negative_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        """The empty prompt's features for a base checkpoint's CFG (a distilled one ignores them)."""
        return {"negative_prompt_embeds": cond["prompt_embeds"].to(device, dtype)}  # [1, L, D]


FAMILY = Flux2KleinFamily()
