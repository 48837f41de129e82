"""Z-Image (Turbo / Base): a single-stream flow transformer taking lists of [C, 1, h, w]
latents and lists of variable-length Qwen3 caption features; its time input is 1 - sigma and it
predicts minus the velocity. Conditioning comes from ZImagePipeline.encode_prompt (Qwen3 with
the chat template, second-to-last hidden state, padding removed). Training sigmas: the
scheduler's static shift (3.0), as diffusers' Z-Image DreamBooth script's timesteps are (session
28 maths audit, tests/families/test_loss_reference.py: its loss to fp32)."""

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
    projection_shape,
    qwen3_shape,
    shifted_vae,
    vae_rules,
)
from lorastudio.families.real_rope import use_real_rope_processors

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

SPEC = FamilySpec(
    name="z-image",
    title="Z-Image",
    pipeline_class="ZImagePipeline",
    accepted_pipelines=("ZImagePipeline", "ZImageImg2ImgPipeline"),
    denoiser="transformer",
    config_rules=(
        *vae_rules("transformer", "latent_channels", "in_channels", 1, 16, "transformer"),
        *shifted_vae("ZImagePipeline"),
        Agrees(
            (Value("text_encoder", ("hidden_size",)),),
            Value("transformer", ("cap_feat_dim",)),
            "text encoder",
        ),
        *autoencoder_shapes(),
        # the released 2x2 (x 1 frame) patch embedder: dim x (in_channels x 2 x 2)
        Shape(
            "transformer",
            ("all_x_embedder.2-1.weight",),
            ((("dim",),), (("in_channels",), 2, 2)),
            "transformer",
        ),
        projection_shape("transformer", "cap_embedder.1.weight", (("dim",),), "cap_feat_dim"),
        embedding_shape("text_encoder", ("embed_tokens.weight",), ("hidden_size",)),
        qwen3_shape(),
    ),
    objective="flow",
    latent_channels=16,
    vae_scale_factor=8,
    resolution_multiple=16,
    lora_targets=("to_q", "to_k", "to_v", "to_out.0"),
    lora_layers_kwarg="transformer_lora_layers",
    patch_size=2,
    denoiser_class="ZImageTransformer2DModel",
    vae_class="AutoencoderKL",
    defaults={"resolution": 1024, "learning_rate": 1e-4, "lora_rank": 16, "max_sequence_length": 512},
    supports=frozenset({"timestep_sampling", "logit_mean", "logit_std", "flow_shift", "max_sequence_length"}),
    generation_defaults={"num_inference_steps": 8, "guidance_scale": 0.0},
    guidance="cfg",
    negative_prompt=True,
    # its default guidance (0) runs no CFG, a sample prompt's own guidance above 0 does, on "":
    # previews need its features then (ZImagePipeline refuses prompt_embeds without them)
    guides_with_negative=True,
    no_cfg_kwargs={"guidance_scale": 0.0},
    fused_projection_groups={
        "ZImageTransformerBlock": (
            ("attention.to_q", "attention.to_k", "attention.to_v"),
            ("feed_forward.w1", "feed_forward.w3"),  # the SwiGLU's two input projections
        )
    },
    # Qwen3's chat template (thinking on) wraps the caption; all of it counts against the limit
    caption_tokens=CaptionTokens("tokenizer", template="chat_thinking"),
    text_padded=False,  # its embeddings cut to the caption's tokens
)


class ZImageFamily(Family):
    spec = SPEC

    def adapt_denoiser(self, denoiser: Any) -> None:
        """Give its attention families/real_rope.py's real-arithmetic RoPE (same values; fused
        under torch.compile)."""
        use_real_rope_processors(denoiser)

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        # the pipeline rewrites the list in place with the chat template: hand it a copy
        embeds, _ = encoders.encode_prompt(
            list(prompts),
            device=encoders.device,
            do_classifier_free_guidance=False,
            max_sequence_length=cfg.max_sequence_length or 512,
        )  # list of [L_i, D]
        return [{"cap_feats": e.cpu()} for e in embeds]

    def collate_conditioning(self, items: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """Z-Image takes a list of variable-length [L_i, D] caption features: no padding."""
        return {"cap_feats": [it["cap_feats"] for it in items]}

    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        return {"prompt_embeds": [c.to(device, dtype) for c in cond["cap_feats"]]}  # 1 x [L, D]

    def pipeline_negative_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        """The features of "" (what ZImagePipeline encodes as its negative prompt); unused at guidance 0."""
        return {"negative_prompt_embeds": [c.to(device, dtype) for c in cond["cap_feats"]]}  # 1 x [L, D]

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

        dtype, device = noisy.dtype, noisy.device
        latents = list(noisy.unsqueeze(2).unbind(0))  # B x [C, 1, h, w]
        caps = [c.to(device, dtype) for c in cond["cap_feats"]]  # B x [L_i, D]
        out = denoiser(latents, (1 - noise_level).to(dtype), caps, return_dict=False)[0]  # B x [C, 1, h, w]
        return -torch.stack(out).squeeze(2)  # [B, C, h, w]: the model predicts minus the velocity


FAMILY = ZImageFamily()
