"""Full-size denoisers with random weights (weights do not change the cost) and synthetic cached
inputs of the real shapes, for the GPU benchmark.

Configs are the released ones: FLUX.1-dev (guidance-distilled), Qwen-Image, Z-Image and the SDXL
base U-Net, as the diffusers classes' defaults or the published config. Text lengths are what a
training run caches: FLUX.1 512 T5 tokens, Qwen-Image and Z-Image 128, SDXL 77.
"""

from __future__ import annotations

from typing import Any

import torch

from bench import models_2026

FAMILY_KEYS = {
    "flux": "flux",
    "qwen": "qwen-image",
    "zimage": "z-image",
    "sdxl": "sdxl",
    **models_2026.FAMILY_KEYS,
}
TEXT_TOKENS = {"flux": 512, "qwen": 128, "zimage": 128, "sdxl": 77}
TEXT_DIM = {"flux": 4096, "qwen": 3584, "zimage": 2560, "sdxl": 2048}
POOLED_DIM = {"flux": 768, "sdxl": 1280}
LATENT_CHANNELS = {"flux": 16, "qwen": 16, "zimage": 16, "sdxl": 4}
BASELINE_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]

SDXL_UNET = dict(
    addition_embed_type="text_time",
    addition_embed_type_num_heads=64,
    addition_time_embed_dim=256,
    attention_head_dim=[5, 10, 20],
    block_out_channels=[320, 640, 1280],
    cross_attention_dim=2048,
    down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    in_channels=4,
    out_channels=4,
    layers_per_block=2,
    projection_class_embeddings_input_dim=2816,
    sample_size=128,
    transformer_layers_per_block=[1, 2, 10],
    up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    use_linear_projection=True,
)


def build_denoiser(name: str, device: str, dtype: torch.dtype, seed: int = 0) -> Any:
    """The full-size denoiser of bench family `name` (flux, qwen, zimage, sdxl), random init,
    built directly on `device` in `dtype`, frozen, train mode (the 2026 families: models_2026)."""
    import diffusers

    if name in models_2026.FAMILY_KEYS:
        return models_2026.build_denoiser(name, device, dtype, seed)

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            if name == "flux":
                model = diffusers.FluxTransformer2DModel(guidance_embeds=True)
            elif name == "qwen":
                model = diffusers.QwenImageTransformer2DModel()
            elif name == "zimage":
                model = diffusers.ZImageTransformer2DModel()
            elif name == "sdxl":
                model = diffusers.UNet2DConditionModel(**SDXL_UNET)
            else:
                raise ValueError(f"unknown bench family {name!r}")
    finally:
        torch.set_default_dtype(previous)
    if name == "zimage":  # pad tokens start as torch.empty
        for pname, p in model.named_parameters():
            if "pad_token" in pname:
                torch.nn.init.normal_(p, std=0.02)
    return model.requires_grad_(False).train()


def synthetic_batch(
    name: str, batch: int, resolution: int, device: str, dtype: torch.dtype, seed: int = 1
) -> tuple[torch.Tensor, dict[str, Any], dict[str, Any]]:
    """(latents [B,C,h,w] dtype on device, collated conditioning as the family's
    collate_conditioning returns it (CPU, like the loop's cache), batch_info) of real shapes."""
    if name in models_2026.FAMILY_KEYS:
        return models_2026.synthetic_batch(name, batch, resolution, device, dtype, seed)
    g = torch.Generator().manual_seed(seed)
    h = w = resolution // 8
    latents = torch.randn(batch, LATENT_CHANNELS[name], h, w, generator=g).to(device, dtype)  # [B,C,h,w]
    n_txt, d_txt = TEXT_TOKENS[name], TEXT_DIM[name]
    embeds = torch.randn(batch, n_txt, d_txt, generator=g).to(dtype)  # [B, L, D]
    if name == "flux":
        cond: dict[str, Any] = {
            "prompt_embeds": embeds,
            "pooled": torch.randn(batch, POOLED_DIM[name], generator=g).to(dtype),
        }
    elif name == "qwen":
        cond = {"prompt_embeds": embeds, "prompt_mask": torch.ones(batch, n_txt, dtype=torch.long)}
    elif name == "zimage":
        cond = {"cap_feats": list(embeds.unbind(0))}
    else:
        cond = {
            "prompt_embeds": embeds,
            "pooled": torch.randn(batch, POOLED_DIM[name], generator=g).to(dtype),
        }
    info = {
        "original_size": [(resolution, resolution)] * batch,
        "crop_top_left": [(0, 0)] * batch,
        "target_size": (resolution, resolution),
    }
    return latents, cond, info


def baseline_inputs(
    name: str, batch: int, resolution: int, device: str, dtype: torch.dtype
) -> tuple[dict[str, Any], torch.Tensor]:
    """Keyword arguments of a plain diffusers forward and a random target, as the diffusers
    example scripts feed them (the plain baseline)."""
    if name in models_2026.FAMILY_KEYS:
        return models_2026.baseline_inputs(name, batch, resolution, device, dtype)
    g = torch.Generator(device).manual_seed(1)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype, generator=g)

    n_txt, d_txt = TEXT_TOKENS[name], TEXT_DIM[name]
    t = torch.rand(batch, device=device, generator=g)
    side = resolution // 16
    if name == "flux":
        ids = torch.zeros(side, side, 3, device=device)
        ids[..., 1] += torch.arange(side, device=device)[:, None]
        ids[..., 2] += torch.arange(side, device=device)[None, :]
        kw = dict(
            hidden_states=r(batch, side * side, 64),
            encoder_hidden_states=r(batch, n_txt, d_txt),
            pooled_projections=r(batch, 768),
            timestep=t.to(dtype),
            img_ids=ids.reshape(-1, 3),
            txt_ids=torch.zeros(n_txt, 3, device=device),
            guidance=torch.full((batch,), 3.5, device=device, dtype=dtype),
            return_dict=False,
        )
        return kw, r(batch, side * side, 64)
    if name == "qwen":
        kw = dict(
            hidden_states=r(batch, side * side, 64),
            encoder_hidden_states=r(batch, n_txt, d_txt),
            encoder_hidden_states_mask=torch.ones(batch, n_txt, device=device, dtype=torch.long),
            timestep=t.to(dtype),
            img_shapes=[[(1, side, side)]] * batch,
            return_dict=False,
        )
        return kw, r(batch, side * side, 64)
    if name == "zimage":
        h = resolution // 8
        kw = dict(
            x=[r(16, 1, h, h) for _ in range(batch)],
            t=t.to(dtype),
            cap_feats=[r(n_txt, d_txt) for _ in range(batch)],
            return_dict=False,
        )
        return kw, r(batch, 16, 1, h, h)
    h = resolution // 8
    kw = dict(
        sample=r(batch, 4, h, h),
        timestep=(t * 1000).long(),
        encoder_hidden_states=r(batch, n_txt, d_txt),
        added_cond_kwargs={"text_embeds": r(batch, 1280), "time_ids": r(batch, 6)},
        return_dict=False,
    )
    return kw, r(batch, 4, h, h)
