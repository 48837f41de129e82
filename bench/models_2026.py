"""Full-size denoisers of the 2026 families for the GPU benchmark (random weights: they do not
change the cost), with synthetic cached inputs of the real shapes; bench/models.py dispatches here.

Configs (transformer config.json of the released checkpoints; the diffusers classes' defaults
where those are the release):
  flux2    FLUX.2 [dev], 32B: Flux2Transformer2DModel() (8 double + 48 single blocks, 48 heads of
           128, Mistral features 3 x 5120 = 15360, guidance embedding)
  klein4b  FLUX.2 [klein] 4B: 5 + 20 blocks, 24 heads, Qwen3-4B features 3 x 2560 = 7680, no guidance
  klein9b  FLUX.2 [klein] 9B: 8 + 24 blocks, 32 heads, Qwen3-8B features 3 x 4096 = 12288
  chroma   Chroma1-HD, 8.9B: ChromaTransformer2DModel() (FLUX.1's 19 + 38 blocks, no CLIP)
  krea2    Krea 2: Krea2Transformer2DModel() (28 blocks, 48 heads of 128, 12 text layers of 2560)
  qedit    Qwen-Image-Edit: QwenImageTransformer2DModel() (Qwen-Image's 20B), one 1024 px control
           whose tokens join the sequence; the instruction's Qwen2.5-VL features hold the control
           as the pipeline sees it (~1 MP: 1024 px / 28 px per merged patch = 1369 vision tokens)
           + 64 text tokens
  qedit2   Qwen-Image-Edit-2511 (Plus, zero_cond_t): two 1024 px controls; the VL sees each at
           384 px (196 vision tokens each) + 64 text tokens
Text lengths are what a run caches: FLUX.2 / klein 512 (encode_prompt pads to it, no mask),
Chroma 512 T5 tokens of which a caption's ~64 are real (the mask hides the rest, as the
pipeline's), Krea 2 the real tokens only (128, as Qwen-Image / Z-Image here).
"""

from __future__ import annotations

from typing import Any

import torch

FAMILY_KEYS = {
    "flux2": "flux2",
    "klein4b": "flux2-klein",
    "klein9b": "flux2-klein",
    "chroma": "chroma",
    "krea2": "krea2",
    "qedit": "qwen-image-edit",
    "qedit2": "qwen-image-edit",
}
CONTROLS = {"qedit": 1, "qedit2": 2}
KLEIN = {
    "klein4b": dict(num_layers=5, num_single_layers=20, num_attention_heads=24, joint_attention_dim=7680),
    "klein9b": dict(num_layers=8, num_single_layers=24, num_attention_heads=32, joint_attention_dim=12288),
}
TEXT_TOKENS = {
    "flux2": 512,
    "klein4b": 512,
    "klein9b": 512,
    "chroma": 512,
    "krea2": 128,
    "qedit": 1433,
    "qedit2": 456,
}
CHROMA_REAL_TOKENS = 64
FLOW_SHIFTED = {
    "shift": 3.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
}
SCHEDULERS: dict[str, dict[str, Any]] = {
    "flux2": FLOW_SHIFTED,
    "klein4b": FLOW_SHIFTED,
    "klein9b": FLOW_SHIFTED,
    "chroma": FLOW_SHIFTED,
    "krea2": {**FLOW_SHIFTED, "shift": 1.0},
    "qedit": {  # Qwen-Image's
        "use_dynamic_shifting": True,
        "base_image_seq_len": 256,
        "max_image_seq_len": 8192,
        "base_shift": 0.5,
        "max_shift": 0.9,
        "time_shift_type": "exponential",
    },
}
SCHEDULERS["qedit2"] = SCHEDULERS["qedit"]


def _construct(name: str) -> Any:
    import diffusers

    if name == "flux2":
        return diffusers.Flux2Transformer2DModel()
    if name in KLEIN:
        return diffusers.Flux2Transformer2DModel(guidance_embeds=False, **KLEIN[name])
    if name == "chroma":
        return diffusers.ChromaTransformer2DModel()
    if name == "krea2":
        return diffusers.Krea2Transformer2DModel()
    if name in CONTROLS:
        return diffusers.QwenImageTransformer2DModel(zero_cond_t=name == "qedit2")
    raise ValueError(f"unknown bench family {name!r}")


def build_denoiser(name: str, device: str, dtype: torch.dtype, seed: int = 0) -> Any:
    """The full-size denoiser of bench family `name`, random init on `device` in `dtype`,
    frozen, train mode."""
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = _construct(name)
    finally:
        torch.set_default_dtype(previous)
    return model.requires_grad_(False).train()


def _text_dim(name: str) -> int:
    if name == "flux2":
        return 15360
    if name in KLEIN:
        return KLEIN[name]["joint_attention_dim"]
    if name == "chroma":
        return 4096
    if name in CONTROLS:
        return 3584  # Qwen2.5-VL 7B
    return 2560  # krea2: per text layer


def synthetic_batch(
    name: str, batch: int, resolution: int, device: str, dtype: torch.dtype, seed: int = 1
) -> tuple[torch.Tensor, dict[str, Any], dict[str, Any]]:
    """(latents [B,C,h,w] on device, the family's collated conditioning (CPU), batch_info)."""
    g = torch.Generator().manual_seed(seed)
    n_txt = TEXT_TOKENS[name]
    if name == "flux2" or name in KLEIN:  # FLUX.2 VAE latents patchified 2x2: 128 channels at /16
        latents = torch.randn(batch, 128, resolution // 16, resolution // 16, generator=g)  # [B,128,h,w]
        cond: dict[str, Any] = {
            "prompt_embeds": torch.randn(batch, n_txt, _text_dim(name), generator=g).to(dtype)
        }
    elif name == "chroma":
        latents = torch.randn(batch, 16, resolution // 8, resolution // 8, generator=g)  # [B,16,h,w]
        mask = torch.zeros(batch, n_txt)  # [B, L] 0/1 float, as ChromaPipeline.encode_prompt
        mask[:, :CHROMA_REAL_TOKENS] = 1
        cond = {"prompt_embeds": torch.randn(batch, n_txt, 4096, generator=g).to(dtype), "prompt_mask": mask}
    elif name in CONTROLS:  # Qwen-Image latents; K controls of the target's size, not noised
        side = resolution // 8
        latents = torch.randn(batch, 16, side, side, generator=g)  # [B,16,h,w]
        cond = {
            "prompt_embeds": torch.randn(batch, n_txt, _text_dim(name), generator=g).to(dtype),
            "prompt_mask": torch.ones(batch, n_txt, dtype=torch.long),
        }
        controls = torch.randn(batch, CONTROLS[name], 16, side, side, generator=g)  # [B,K,16,h,w]
    else:  # krea2: the real tokens of 12 text layers, all real (mask all True)
        latents = torch.randn(batch, 16, resolution // 8, resolution // 8, generator=g)  # [B,16,h,w]
        layers = 12
        cond = {
            "prompt_embeds": torch.randn(batch, n_txt, layers, _text_dim(name), generator=g).to(dtype),
            "prompt_mask": torch.ones(batch, n_txt, dtype=torch.bool),
            "layout": torch.ones(batch, n_txt, dtype=torch.bool),
        }
    info: dict[str, Any] = {
        "original_size": [(resolution, resolution)] * batch,
        "crop_top_left": [(0, 0)] * batch,
        "target_size": (resolution, resolution),
    }
    if name in CONTROLS:
        info["controls"] = controls.to(device, dtype)  # as the loop hands control latents over
    return latents.to(device, dtype), cond, info


def baseline_inputs(
    name: str, batch: int, resolution: int, device: str, dtype: torch.dtype
) -> tuple[dict[str, Any], torch.Tensor]:
    """A plain diffusers forward's keyword arguments (as the pipelines call the transformer) and
    a random target of the output's shape."""
    from diffusers import ChromaPipeline, Flux2Pipeline, Krea2Pipeline

    g = torch.Generator(device).manual_seed(1)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype, generator=g)

    n_txt = TEXT_TOKENS[name]
    t = torch.rand(batch, device=device, generator=g).to(dtype)
    if name == "flux2" or name in KLEIN:
        side = resolution // 16
        latents = r(batch, 128, side, side)  # [B,128,h,w]
        embeds = r(batch, n_txt, _text_dim(name))  # [B, L, D]
        kw = dict(
            hidden_states=Flux2Pipeline._pack_latents(latents),  # [B, h*w, 128]
            encoder_hidden_states=embeds,
            timestep=t,
            img_ids=Flux2Pipeline._prepare_latent_ids(latents).to(device),  # [B, h*w, 4]
            txt_ids=Flux2Pipeline._prepare_text_ids(embeds).to(device),  # [B, L, 4]
            guidance=torch.full((batch,), 4.0, device=device) if name == "flux2" else None,
            return_dict=False,
        )
        return kw, r(batch, side * side, 128)
    side = resolution // 16  # 2x2 patches of the /8 latents
    if name == "chroma":
        mask = torch.ones(batch, n_txt + side * side, device=device, dtype=dtype)  # [B, L + hw]
        mask[:, CHROMA_REAL_TOKENS:n_txt] = 0
        kw = dict(
            hidden_states=r(batch, side * side, 64),
            encoder_hidden_states=r(batch, n_txt, 4096),
            timestep=t,
            img_ids=ChromaPipeline._prepare_latent_image_ids(batch, side, side, device, dtype),
            txt_ids=torch.zeros(n_txt, 3, device=device, dtype=dtype),
            attention_mask=mask,
            return_dict=False,
        )
        return kw, r(batch, side * side, 64)
    if name in CONTROLS:  # the target's tokens, then each control's; the loss over all outputs
        k = CONTROLS[name]
        kw = dict(
            hidden_states=r(batch, (1 + k) * side * side, 64),
            encoder_hidden_states=r(batch, n_txt, 3584),
            encoder_hidden_states_mask=torch.ones(batch, n_txt, device=device, dtype=torch.long),
            timestep=t,
            img_shapes=[[(1, side, side)] * (1 + k)] * batch,
            return_dict=False,
        )
        return kw, r(batch, (1 + k) * side * side, 64)
    kw = dict(  # krea2
        hidden_states=r(batch, side * side, 64),
        encoder_hidden_states=r(batch, n_txt, 12, 2560),
        timestep=t,
        position_ids=Krea2Pipeline.prepare_position_ids(n_txt, side, side, device),
        return_dict=False,
    )
    return kw, r(batch, side * side, 64)
