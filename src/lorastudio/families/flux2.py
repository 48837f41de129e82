"""FLUX.2 [dev]: a rectified-flow transformer (dual-stream, then single-stream blocks whose
q/k/v and MLP input are one fused linear) over 4-axis RoPE tokens; Mistral-Small-3.1 text
features (hidden states 10, 20 and 30 stacked per token); a guidance embedding (guidance-
distilled). Conditioning comes from Flux2Pipeline.encode_prompt, so it matches inference.

Latent space: the FLUX.2 VAE's 32-channel latents patchified 2x2 into 128 channels and
normalised by the VAE's BatchNorm running statistics, exactly the tensor the pipeline denoises
(`latents` [B, 128, H/16, W/16]); one latent cell is one token (patch_size 1).

Reference images (edit, multi-reference): Flux2Pipeline's `image=` references are VAE-encoded
(posterior mean) into the same normalised latent space, packed to tokens and appended after the
target's tokens, with position ids from Flux2Pipeline._prepare_image_ids (time axis 10, 20, ...
per reference); only the target tokens' prediction is kept. `predict` builds them with those
pipeline functions from batch_info["controls"], so it is one step of the pipeline with references.
The same family trains text-to-image (no controls) and edits, also mixed in one dataset: each
batch holds samples with the same number of references (data/sampler.py groups them).

The shared pieces (latents, predict, time shift) live here and serve FLUX.2 [klein] too
(families/flux2_klein.py), which differs only in its text encoder and guidance.

Deliberate choices against diffusers' FLUX.2 DreamBooth scripts (session 28 maths audit,
tests/families/test_loss_reference.py checks the rest to fp32): the latents are a posterior
sample (the scripts take its mean, `mode()`), the sigmas are shifted by calculate_shift from the
scheduler config (the scripts' are its unshifted timesteps; Flux2Pipeline's empirical mu also
depends on the inference step count), and FLUX.2 [dev]'s guidance embedding gets 1.0 by default
(the scripts' --guidance_scale defaults to 3.5; a run may set it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.data.control_sizing import ControlSizing
from lorastudio.families.base import CaptionTokens, Family, FamilySpec
from lorastudio.families.common import DUAL_STREAM_QKV, no_grad
from lorastudio.families.config_rules import (
    HEADS,
    Agrees,
    Value,
    autoencoder_shapes,
    embedding_shape,
    projection_shape,
    vae_rules,
)

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig

# LoRA targets: the dual-stream blocks' attention projections and MLPs (both streams) and the
# single-stream blocks' fused q/k/v+MLP input, as DiffSynth-Studio's FLUX.2 LoRA recipes do.
# The single blocks' output linear (`attn.to_out`) shares its suffix with the dual blocks'
# to_out ModuleList, so no suffix names it alone (name it per block in lora_targets to add it).
FLUX2_TARGETS = (
    "to_q",
    "to_k",
    "to_v",
    "to_out.0",
    "add_q_proj",
    "add_k_proj",
    "add_v_proj",
    "to_add_out",
    "linear_in",
    "linear_out",
    "to_qkv_mlp_proj",
)
FLUX2_SUPPORTS = frozenset(
    {"timestep_sampling", "logit_mean", "logit_std", "flow_shift", "max_sequence_length"}
)
MAX_TEXT_TOKENS = 512  # Flux2Pipeline.tokenizer_max_length
# reference images per sample (docs.bfl.ml image-editing overview: FLUX.2 [dev] "recommended
# max 6", the FLUX.2 API up to 10; [klein] 4B/9B up to 4); the pipelines themselves set none
MAX_REFERENCES_DEV = 10
MAX_REFERENCES_KLEIN = 4

SPEC = FamilySpec(
    name="flux2",
    title="FLUX.2 dev",  # no brackets: rich (the CLI tables) reads "[dev]" as markup
    pipeline_class="Flux2Pipeline",
    accepted_pipelines=("Flux2Pipeline",),
    denoiser="transformer",
    config_rules=(
        *vae_rules("transformer", "latent_channels", "in_channels", 2, 32, "transformer"),
        Agrees(  # three of the text model's layers stacked per token
            (Value("text_encoder", ("text_config.hidden_size", "hidden_size")),),
            Value("transformer", ("joint_attention_dim",)),
            "text encoder",
            factor=3,
            how="3 stacked layers",
        ),
        *autoencoder_shapes(),
        projection_shape("transformer", "x_embedder.weight", HEADS, "in_channels"),
        projection_shape("transformer", "context_embedder.weight", HEADS, "joint_attention_dim"),
        embedding_shape("text_encoder", ("embed_tokens.weight",), ("text_config.hidden_size", "hidden_size")),
    ),
    objective="flow",
    latent_channels=128,  # 32 VAE channels x 2x2 patch
    vae_scale_factor=16,  # 8x VAE, then the 2x2 patch
    resolution_multiple=16,
    lora_targets=FLUX2_TARGETS,
    lora_layers_kwarg="transformer_lora_layers",
    patch_size=1,
    denoiser_class="Flux2Transformer2DModel",
    vae_class="AutoencoderKLFlux2",
    # lr 1e-4: DiffSynth-Studio's FLUX.2-dev LoRA recipe (examples/flux2/model_training/lora);
    # guidance 1 while training and rank 16, as for FLUX.1 (a guidance-distilled base, as
    # ai-toolkit's FLUX.2 model treats it). Timesteps: logit-normal sigmas with FLUX.1's
    # resolution-dependent shift (base 0.5 to max 1.15 over 256..4096 tokens, from the
    # checkpoint's scheduler config), the train scheduler of ai-toolkit's FLUX.2 model.
    defaults={
        # ComfyUI maps FLUX.2 LoRAs by their BFL names only (no diffusers-key table for it);
        # diffusers' FLUX.2 loader reads the same kohya/BFL file: the portable default
        "lora_format": "kohya",
        "resolution": 1024,
        "learning_rate": 1e-4,
        "lora_rank": 16,
        "guidance": 1.0,
        "max_sequence_length": MAX_TEXT_TOKENS,
    },
    supports=FLUX2_SUPPORTS | {"guidance"},
    # Flux2Pipeline's documented call: 50 steps, guidance 4 (the embedded guidance)
    generation_defaults={"num_inference_steps": 50, "guidance_scale": 4.0},
    guidance="embedded",
    # the dual-stream blocks' q/k/v per stream (the single blocks' are one linear already)
    fused_projection_groups={"Flux2TransformerBlock": DUAL_STREAM_QKV},
    control_images=(0, MAX_REFERENCES_DEV),  # text-to-image, or edit with 1..10 references
    min_reference_side=64,  # Flux2ImageProcessor.check_image_input
    max_sequence_length_max=MAX_TEXT_TOKENS,
    # its system message and Mistral's chat template wrap the caption, all counted against the limit
    caption_tokens=CaptionTokens("tokenizer", template="flux2_system"),
    # Flux2Pipeline scales a reference over 1 MP down to 1 MP, then floors its sides to 16
    control_sizing=ControlSizing("cap_area", area=1024 * 1024, multiple=16, label="<= 1 MP"),
)


def bn_std(vae: Any) -> torch.Tensor:
    """The VAE's BatchNorm standard deviation per patchified channel, [1, 4C, 1, 1] float32."""
    import torch

    return torch.sqrt(vae.bn.running_var.float().view(1, -1, 1, 1) + vae.config.batch_norm_eps)


def normalise(patched: torch.Tensor, vae: Any) -> torch.Tensor:
    """Patchified VAE latents [B, 4C, h, w] -> the normalised latent space (BatchNorm stats)."""
    mean = vae.bn.running_mean.float().view(1, -1, 1, 1).to(patched.device)  # [1, 4C, 1, 1]
    return (patched.float() - mean) / bn_std(vae).to(patched.device)


def reference_tokens(controls: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference latents [B, K, C, h, w] (or K slots [B, C, h_k, w_k] of their own sizes) ->
    (tokens [B, R, C], position ids [B, R, 4]), R = the slots' cells, as
    Flux2Pipeline.prepare_image_latents lays out its encoded `image=` references: each packed
    row-major, concatenated in slot order, ids from Flux2Pipeline._prepare_image_ids."""
    import torch
    from diffusers import Flux2Pipeline

    if isinstance(controls, tuple):
        per_slot = list(controls)  # K x [B, C, h_k, w_k]
    else:
        per_slot = [controls[:, i] for i in range(controls.shape[1])]  # K x [B, C, h, w]
    b = per_slot[0].shape[0]
    ids = Flux2Pipeline._prepare_image_ids([lat[:1] for lat in per_slot])  # [1, K*h*w, 4]
    tokens = torch.cat([Flux2Pipeline._pack_latents(lat) for lat in per_slot], dim=1)  # [B, K*h*w, C]
    return tokens, ids.expand(b, -1, -1).to(per_slot[0].device)


def tokens_to_latents(tokens: torch.Tensor, latent_hw: tuple[int, int]) -> torch.Tensor:
    """Row-major image tokens [B, h*w, C] -> [B, C, h, w] (inverse of Flux2Pipeline._pack_latents)."""
    b, _, c = tokens.shape
    return tokens.transpose(1, 2).reshape(b, c, *latent_hw)


class Flux2Family(Family):
    spec = SPEC

    def load_text_encoders(
        self, source: str, revision: str | None, dtype: torch.dtype, device: torch.device
    ) -> Any:
        """The pipeline without its transformer and VAE. FLUX.2 dev's tokenizer is a
        PixtralProcessor, which transformers builds only with torchvision: its absence is a
        ModelSourceError saying so (not a bare ImportError mid-run)."""
        from lorastudio.errors import ModelSourceError

        try:
            return super().load_text_encoders(source, revision, dtype, device)
        except ImportError as err:
            raise ModelSourceError(
                f"cannot load the tokenizer of {source!r} ({err}); FLUX.2 dev's PixtralProcessor "
                "needs torchvision: pip install torchvision (the build matching your torch)"
            ) from err

    @no_grad
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        embeds, _ = encoders.encode_prompt(
            list(prompts),
            device=encoders.device,
            max_sequence_length=cfg.max_sequence_length or MAX_TEXT_TOKENS,
        )  # [N, L, 3*D]: padded to L, the transformer sees every position (no mask)
        return [{"prompt_embeds": e.cpu()} for e in embeds]

    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        return {"prompt_embeds": cond["prompt_embeds"].to(device, dtype)}  # [1, L, D]

    @no_grad
    def encode_pixels(self, vae: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The posterior patchified 2x2 and normalised by the VAE's BatchNorm statistics, as
        Flux2Pipeline._encode_vae_image does."""
        from diffusers import Flux2Pipeline

        dist = vae.encode(pixels.to(vae.dtype)).latent_dist
        mean = Flux2Pipeline._patchify_latents(dist.mean.float())  # [B, 4C, H/16, W/16]
        std = Flux2Pipeline._patchify_latents(dist.std.float())  # [B, 4C, H/16, W/16]
        return normalise(mean, vae), std / bn_std(vae)

    def from_pipeline_latents(self, pipe: Any, out: torch.Tensor, latent_hw: tuple[int, int]) -> torch.Tensor:
        """Flux2Pipeline returns its packed tokens [B, h*w, C]; Flux2KleinPipeline the VAE's raw
        latents [B, C/4, 2h, 2w] (un-normalised, unpatchified): both back to [B, C, h, w]."""
        if out.ndim == 3:
            return tokens_to_latents(out, latent_hw)
        patched = pipe._patchify_latents(out.float())  # [B, C, h, w]
        return normalise(patched, pipe.vae)

    def guidance(
        self, denoiser: Any, cfg: TrainConfig, batch: int, device: torch.device
    ) -> torch.Tensor | None:
        """The guidance embedding's input [B] (cfg.guidance), or None for a model without one."""
        import torch

        if not denoiser.config.guidance_embeds:
            return None
        value = float(cfg.guidance if cfg.guidance is not None else 1.0)
        return torch.full((batch,), value, device=device, dtype=torch.float32)

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
        from diffusers import Flux2Pipeline

        b, c, h, w = noisy.shape
        dtype, device = noisy.dtype, noisy.device
        embeds = cond["prompt_embeds"].to(device, dtype)  # [B, L, D]
        tokens = Flux2Pipeline._pack_latents(noisy)  # [B, h*w, C]
        ids = Flux2Pipeline._prepare_latent_ids(noisy).to(device)  # [B, h*w, 4]
        controls = batch_info.get("controls")  # [B, K, C, h', w'], K x [B, C, h_k, w_k], or None
        if controls is not None:
            moved = tuple(c.to(device, dtype) for c in controls) if isinstance(controls, tuple) else None
            refs, ref_ids = reference_tokens(moved or controls.to(device, dtype))  # [B, R, C], [B, R, 4]
            tokens = torch.cat([tokens, refs], dim=1)  # [B, h*w + R, C]
            ids = torch.cat([ids, ref_ids], dim=1)  # [B, h*w + R, 4]
        out = denoiser(
            hidden_states=tokens,
            encoder_hidden_states=embeds,
            timestep=noise_level.to(dtype),  # sigma: the pipeline passes t / 1000
            img_ids=ids,
            txt_ids=Flux2Pipeline._prepare_text_ids(embeds).to(device),  # [B, L, 4]
            guidance=self.guidance(denoiser, cfg, b, device),
            return_dict=False,
        )[0][:, : h * w]  # [B, h*w, C]: the target tokens
        return tokens_to_latents(out, (h, w))  # [B, C, h, w]


FAMILY = Flux2Family()
