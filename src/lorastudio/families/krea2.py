"""Krea 2: a single-stream flow transformer on patch-packed 16-channel latents of the
Qwen-Image VAE, conditioned on a stack of Qwen3-VL hidden states (one per tapped layer) that
the model's own text-fusion stage collapses. Its time input is sigma and it predicts the
velocity (noise - x0). Read from the checkpoint, never hard-coded:
  - which encoder layers are tapped: Krea2Pipeline's `text_encoder_select_layers` (its
    model_index.json), used by the pipeline's own encode_prompt that phase 1 calls;
  - the patch side: model_index.json's `patch_size`, checked against the transformer's
    in_channels (= 16 x patch^2) when the denoiser loads; predict packs with it;
  - base or few-step distilled (TDM): `is_distilled` (Family.distilled reads it).
Conditioning drops the padding Krea 2 puts in the middle of its template ([prompt | PAD |
suffix]): padded tokens are masked as keys everywhere and the text-fusion's layer-wise blocks
work per token, so the image tokens see exactly what they see with the padding; collate pads
again to the batch's longest with a mask.

Training sigmas (session 28 maths audit): the base checkpoint's inference shift (dynamic,
calculate_shift from the scheduler config at the image's token count), for every checkpoint:
Krea2Pipeline gives a few-step distilled one (`is_distilled`) a fixed mu of 1.15 whatever the
size, which training does not follow (a weighting of the noise levels, not the objective: the
target is the velocity at every level; flow_shift sets another), as FLUX.2 [klein]'s
step-count-dependent empirical mu is not followed either. diffusers' Krea 2 DreamBooth script
samples the scheduler's unshifted timesteps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.errors import ModelSourceError
from lorastudio.families.base import CaptionTokens, Family, FamilySpec
from lorastudio.families.common import (
    no_grad,
    pack_patches,
    qwen_vae_posterior,
    unpack_patches,
    without_cudnn,
)
from lorastudio.families.config_rules import (
    HEADS,
    Agrees,
    Value,
    projection_shape,
    qwen_vl_pipeline_shapes,
)
from lorastudio.hub_token import hub_kwargs

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

SPEC = FamilySpec(
    name="krea2",
    title="Krea 2",
    pipeline_class="Krea2Pipeline",
    accepted_pipelines=("Krea2Pipeline",),
    denoiser="transformer",
    config_rules=(
        Agrees((Value("vae", ("z_dim",)),), 16, "VAE", how="the Qwen-Image VAE's 16 latent channels"),
        Agrees(
            (Value("text_encoder", ("text_config.hidden_size", "hidden_size")),),
            Value("transformer", ("text_hidden_dim",)),
            "text encoder",
        ),
        *qwen_vl_pipeline_shapes(),
        projection_shape("transformer", "img_in.weight", HEADS, "in_channels"),
    ),
    objective="flow",
    latent_channels=16,
    vae_scale_factor=8,
    resolution_multiple=16,  # vae 8 x the released checkpoints' patch 2 (load_denoiser checks it)
    lora_targets=("to_q", "to_k", "to_v", "to_gate", "to_out.0"),
    lora_layers_kwarg="transformer_lora_layers",
    patch_size=2,
    denoiser_class="Krea2Transformer2DModel",
    vae_class="AutoencoderKLQwenImage",
    # No Krea 2 recipe is published in ai-toolkit / SimpleTuner yet: these follow ai-toolkit's
    # config/examples/train_lora_qwen_image_24gb.yaml (the same VAE and a Qwen-VL text
    # encoder): LoRA 16/16, lr 1e-4, 2000 steps, 1024 px top bucket, flowmatch with ai-toolkit's
    # default "sigmoid" timesteps; 512 text tokens (Krea2Pipeline's default)
    defaults={
        # ComfyUI's own layout for Krea 2 (diffusion_model.<original name>; since v0.33.0 it maps the
        # diffusers names too, older releases did not); diffusers' Krea 2 reader loads the same
        # file: the portable default (as FLUX.2's)
        "lora_format": "kohya",
        "resolution": 1024,
        "learning_rate": 1e-4,
        "lora_rank": 16,
        "steps": 2000,
        "timestep_sampling": "sigmoid",
        "max_sequence_length": 512,
    },
    supports=frozenset({"timestep_sampling", "logit_mean", "logit_std", "flow_shift", "max_sequence_length"}),
    generation_defaults={"num_inference_steps": 28, "guidance_scale": 4.5},  # Krea2Pipeline's base defaults
    guidance="cfg",
    negative_prompt=True,
    fused_projection_groups={
        "Krea2TransformerBlock": (
            ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_gate"),
            ("ff.gate", "ff.up"),  # the SwiGLU's two input projections
        )
    },
    no_cfg_kwargs={"guidance_scale": 0.0},  # Krea2Pipeline guides when guidance_scale > 0
    guides_with_negative=True,
    # prefix + caption cut at max_sequence_length less its 5-token suffix (the prefix dropped)
    caption_tokens=CaptionTokens("tokenizer", template="krea2"),
    text_padded=False,  # its embeddings cut to the caption's tokens
)


def patch_side(denoiser: Any) -> int:
    """The transformer's patch side, from its config: in_channels = latent channels x p^2."""
    return math.isqrt(int(denoiser.config.in_channels) // SPEC.latent_channels)


class Krea2Family(Family):
    spec = SPEC

    def load_denoiser(
        self, source: str, revision: str | None, dtype: torch.dtype, device: torch.device
    ) -> Any:
        """The transformer, after checking that the pipeline's patch_size (model_index.json)
        is the one its in_channels implies. Raises ModelSourceError otherwise."""
        from diffusers import Krea2Pipeline

        denoiser = super().load_denoiser(source, revision, dtype, device)
        try:
            index = Krea2Pipeline.load_config(source, revision=revision, **hub_kwargs())
        except (OSError, ValueError) as err:
            raise ModelSourceError(f"cannot read model_index.json of {source!r}: {err}") from err
        declared, implied = int(index.get("patch_size", 2)), patch_side(denoiser)
        if declared != implied or declared * declared * SPEC.latent_channels != denoiser.config.in_channels:
            raise ModelSourceError(
                f"{source}: model_index.json says patch_size {declared}, but the transformer's "
                f"in_channels {denoiser.config.in_channels} is not {SPEC.latent_channels} x {declared}^2"
            )
        return denoiser

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        embeds, mask = encoders.encode_prompt(
            list(prompts), device=encoders.device, max_sequence_length=cfg.max_sequence_length or 512
        )  # [N, L, layers, D], [N, L] bool (padding in the middle)
        # the real tokens [n_i, layers, D], and where they sit in the pipeline's layout [L]
        return [{"prompt_embeds": e[m].cpu(), "layout": m.cpu()} for e, m in zip(embeds, mask, strict=True)]

    def collate_conditioning(self, items: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """Pad the [n_i, layers, D] token stacks to the batch's longest; mask marks real tokens;
        `layout` [B, L]: where the real tokens sit in the pipeline's fixed-length layout."""
        import torch

        longest = max(it["prompt_embeds"].shape[0] for it in items)
        first = items[0]["prompt_embeds"]
        embeds = first.new_zeros(len(items), longest, *first.shape[1:])  # [B, L, layers, D]
        mask = torch.zeros(len(items), longest, dtype=torch.bool)  # [B, L]
        for i, it in enumerate(items):
            n = it["prompt_embeds"].shape[0]
            embeds[i, :n] = it["prompt_embeds"]
            mask[i, :n] = True
        return {
            "prompt_embeds": embeds,
            "prompt_mask": mask,
            "layout": torch.stack([it["layout"] for it in items]),
        }

    @staticmethod
    def _pipeline_layout(cond: dict[str, Any], device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
        """One prompt's tokens put back where the pipeline's encode_prompt has them ([prompt |
        PAD | suffix], padding zeroed: it is masked everywhere): ([1, L, layers, D], [1, L])."""
        layout = cond["layout"]  # [1, L] bool
        real = cond["prompt_embeds"][cond["prompt_mask"]]  # [n, layers, D]
        embeds = real.new_zeros(*layout.shape, *real.shape[1:])  # [1, L, layers, D]
        embeds[layout] = real
        return embeds.to(device, dtype), layout.to(device)

    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        embeds, mask = self._pipeline_layout(cond, device, dtype)
        return {"prompt_embeds": embeds, "prompt_embeds_mask": mask}  # [1, L, layers, D], [1, L]

    def pipeline_negative_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        embeds, mask = self._pipeline_layout(cond, device, dtype)
        return {"negative_prompt_embeds": embeds, "negative_prompt_embeds_mask": mask}

    def encode_pixels(self, vae: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return qwen_vae_posterior(vae, pixels)

    def to_pipeline_latents(self, pipe: Any, latents: torch.Tensor) -> torch.Tensor:
        return pack_patches(latents, patch_side(pipe.transformer))  # [B, hw/p^2, C*p^2]

    def from_pipeline_latents(self, pipe: Any, out: torch.Tensor, latent_hw: tuple[int, int]) -> torch.Tensor:
        return unpack_patches(out, *latent_hw, patch_side(pipe.transformer))  # [B, C, h, w]

    def predict(
        self,
        denoiser: Any,
        noisy: torch.Tensor,
        noise_level: torch.Tensor,
        cond: dict[str, Any],
        batch_info: Mapping[str, Any],
        cfg: TrainConfig,
    ) -> torch.Tensor:
        from diffusers import Krea2Pipeline

        _, _, h, w = noisy.shape
        dtype, device = noisy.dtype, noisy.device
        p = patch_side(denoiser)
        embeds = cond["prompt_embeds"].to(device, dtype)  # [B, L, layers, D]
        mask = cond["prompt_mask"]  # [B, L] bool, on the CPU: checking it costs no device sync
        positions = Krea2Pipeline.prepare_position_ids(
            embeds.shape[1], h // p, w // p, device
        )  # [L+hw/p^2, 3]
        with without_cudnn(not bool(mask.all())):  # a mask keeps cuDNN out (bench note 24)
            out = denoiser(
                hidden_states=pack_patches(noisy, p),  # [B, hw/p^2, C*p^2]
                encoder_hidden_states=embeds,
                timestep=noise_level.to(dtype),  # sigma: the pipeline passes t / num_train_timesteps
                position_ids=positions,
                encoder_attention_mask=None if bool(mask.all()) else mask.to(device),
                return_dict=False,
            )[0]
        return unpack_patches(out, h, w, p)  # [B, C, h, w]


FAMILY = Krea2Family()
