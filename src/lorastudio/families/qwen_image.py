"""Qwen-Image: a dual-stream flow transformer on 2x2-packed 16-channel latents of a 5-D (video
style) VAE normalised with per-channel mean/std; Qwen2.5-VL text features of variable length with
an attention mask; sigmas shifted the way QwenImagePipeline shifts them at inference (dynamic,
exponential, from the image sequence length). That shift is a deliberate choice (session 28
maths audit): diffusers' Qwen-Image DreamBooth script samples its timesteps from the scheduler's
unshifted ones (its config shifts dynamically, at inference only), where lorastudio trains at
the noise levels the pipeline denoises at; flow_shift 1 gives the script's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.families.base import CaptionTokens, Family, FamilySpec
from lorastudio.families.common import (
    DUAL_STREAM_QKV,
    Packed2x2Latents,
    no_grad,
    pack_2x2,
    qwen_vae_posterior,
    unpack_2x2,
    without_cudnn,
)
from lorastudio.families.config_rules import (
    HEADS,
    Agrees,
    Value,
    projection_shape,
    qwen_vl_pipeline_shapes,
    vae_rules,
)
from lorastudio.families.real_rope import use_real_rope

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

SPEC = FamilySpec(
    name="qwen-image",
    title="Qwen-Image",
    pipeline_class="QwenImagePipeline",
    accepted_pipelines=("QwenImagePipeline", "QwenImageImg2ImgPipeline", "QwenImageInpaintPipeline"),
    denoiser="transformer",
    config_rules=(
        *vae_rules("transformer", "z_dim", "in_channels", 2, 16, "transformer"),
        Agrees(
            (Value("text_encoder", ("text_config.hidden_size", "hidden_size")),),
            Value("transformer", ("joint_attention_dim",)),
            "text encoder",
        ),
        *qwen_vl_pipeline_shapes(),
        projection_shape("transformer", "img_in.weight", HEADS, "in_channels"),
        projection_shape("transformer", "txt_in.weight", HEADS, "joint_attention_dim"),
    ),
    objective="flow",
    latent_channels=16,
    vae_scale_factor=8,
    resolution_multiple=16,
    lora_targets=("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"),
    lora_layers_kwarg="transformer_lora_layers",
    patch_size=2,
    denoiser_class="QwenImageTransformer2DModel",
    vae_class="AutoencoderKLQwenImage",
    defaults={"resolution": 1024, "learning_rate": 1e-4, "lora_rank": 16, "max_sequence_length": 512},
    supports=frozenset({"timestep_sampling", "logit_mean", "logit_std", "flow_shift", "max_sequence_length"}),
    generation_defaults={"num_inference_steps": 30, "true_cfg_scale": 4.0},
    guidance="true_cfg",
    negative_prompt=True,
    fused_projection_groups={"QwenImageTransformerBlock": DUAL_STREAM_QKV},
    # its prompt_template_encode wraps the caption; the template's tail counts against the limit
    caption_tokens=CaptionTokens("tokenizer", template="qwen_image"),
    text_padded=False,  # its embeddings cut to the caption's tokens
)


class QwenImageFamily(Packed2x2Latents, Family):
    spec = SPEC

    def adapt_denoiser(self, denoiser: Any) -> None:
        """Rotate queries and keys with families/real_rope.py's real-arithmetic RoPE (same
        values; fused under torch.compile). Process-wide: diffusers' function is replaced."""
        use_real_rope()

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        embeds, mask = encoders.encode_prompt(
            list(prompts), device=encoders.device, max_sequence_length=cfg.max_sequence_length or 512
        )  # [N, L, D], [N, L] or None when nothing is padded
        lengths = mask.sum(dim=1).tolist() if mask is not None else [embeds.shape[1]] * len(prompts)
        return [{"prompt_embeds": e[: int(n)].cpu()} for e, n in zip(embeds, lengths, strict=True)]

    def collate_conditioning(self, items: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """Pad the variable-length [L_i, D] features to the batch's longest; mask marks real tokens."""
        import torch

        longest = max(it["prompt_embeds"].shape[0] for it in items)
        dim = items[0]["prompt_embeds"].shape[1]
        embeds = torch.zeros(len(items), longest, dim, dtype=items[0]["prompt_embeds"].dtype)  # [B, L, D]
        mask = torch.zeros(len(items), longest, dtype=torch.long)  # [B, L]
        for i, it in enumerate(items):
            n = it["prompt_embeds"].shape[0]
            embeds[i, :n] = it["prompt_embeds"]
            mask[i, :n] = 1
        return {"prompt_embeds": embeds, "prompt_mask": mask}

    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        return {
            "prompt_embeds": cond["prompt_embeds"].to(device, dtype),  # [1, L, D]
            "prompt_embeds_mask": cond["prompt_mask"].to(device),  # [1, L]
        }

    def encode_pixels(self, vae: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return qwen_vae_posterior(vae, pixels)

    def predict(
        self,
        denoiser: Any,
        noisy: torch.Tensor,
        noise_level: torch.Tensor,
        cond: dict[str, Any],
        batch_info: Mapping[str, Any],
        cfg: TrainConfig,
    ) -> torch.Tensor:
        b, _, h, w = noisy.shape
        dtype, device = noisy.dtype, noisy.device
        mask = cond["prompt_mask"]  # [B, L], on the CPU: checking it costs no device sync
        # no padding -> no mask, so attention can take the fast (flash) kernel; a mask keeps
        # cuDNN out of the call (it crashed on masks: bench note 24)
        with without_cudnn(not bool(mask.all())):
            out = denoiser(
                hidden_states=pack_2x2(noisy),  # [B, hw/4, C*4]
                encoder_hidden_states=cond["prompt_embeds"].to(device, dtype),  # [B, L, D]
                encoder_hidden_states_mask=None if bool(mask.all()) else mask.to(device),
                timestep=noise_level.to(dtype),
                img_shapes=[[(1, h // 2, w // 2)]] * b,
                return_dict=False,
            )[0]
        return unpack_2x2(out, h, w)  # [B, C, h, w]


FAMILY = QwenImageFamily()
