"""Builders of LoRA files with text-encoder layers on the tiny pipelines' real modules, in
OneTrainer's layout (its default "legacy diffusers" keys: `lora_unet_<diffusers U-Net name>` /
`lora_transformer_<diffusers name>`, `lora_te1_` / `lora_te2_` + the encoder's module name, "_"
for ".", each with `.alpha` = 2 x rank) and the equivalent diffusers layout (the same layers, the
change 2 * up @ down in lora_B, alpha = rank): the two apply the same weight change, exactly (a
factor 2 is exact in floating point)."""

from __future__ import annotations

import torch

RANK = 2
_CLIP_FILE = "text_model."  # the files' spelling of CLIP's modules (transformers 5 drops it)


def _clip_name(name: str) -> str:
    return name if name.startswith(("text_model.", "text_projection")) else _CLIP_FILE + name


def _linears(module: torch.nn.Module, pick=lambda n: True) -> dict[str, torch.nn.Linear]:
    return {n: m for n, m in module.named_modules() if isinstance(m, torch.nn.Linear) and pick(n)}


def _layers(
    module: torch.nn.Module, gen: torch.Generator, std: float, pick=lambda n: True, rename=lambda n: n
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{file module name: (down [r, in], up [out, r])} of random LoRA layers on `module`'s Linears."""
    out = {}
    for name, lin in _linears(module, pick).items():
        down = torch.randn(RANK, lin.in_features, generator=gen) * std  # [r, in]
        up = torch.randn(lin.out_features, RANK, generator=gen) * std  # [out, r]
        out[rename(name)] = (down, up)
    return out


def _onetrainer(prefix: str, layers: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    out = {}
    for name, (down, up) in layers.items():
        flat = prefix + name.replace(".", "_")
        out |= {f"{flat}.lora_down.weight": down, f"{flat}.lora_up.weight": up}
        out[f"{flat}.alpha"] = torch.tensor(2.0 * RANK)  # the change is 2 * up @ down
    return out


def _diffusers(prefix: str, layers: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    out = {}
    for name, (down, up) in layers.items():
        out |= {f"{prefix}.{name}.lora_A.weight": down, f"{prefix}.{name}.lora_B.weight": up * 2}
    return out


def _denoiser_pick(name: str) -> bool:
    return name.endswith(
        ("attn1.to_q", "attn2.to_out.0", "ff.net.2", "proj_in", "attn.to_q", "attn.add_q_proj")
    )


def sdxl_files(pipe, seed: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(OneTrainer's SDXL file: U-Net + CLIP-L + CLIP-G with its text_projection, the same LoRA
    in the diffusers layout)."""
    gen = torch.Generator().manual_seed(seed)
    unet = _layers(pipe.unet, gen, 0.3, _denoiser_pick)
    te1 = _layers(pipe.text_encoder, gen, 0.3, rename=_clip_name)
    te2 = _layers(pipe.text_encoder_2, gen, 0.3, rename=_clip_name)
    assert "text_projection" in te2 and any("self_attn.out_proj" in n for n in te1)
    theirs = _onetrainer("lora_unet_", unet) | _onetrainer("lora_te1_", te1) | _onetrainer("lora_te2_", te2)
    ours = _diffusers("unet", unet) | _diffusers("text_encoder", te1) | _diffusers("text_encoder_2", te2)
    return theirs, ours


def flux_files(
    pipe, seed: int = 0
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(OneTrainer's FLUX.1 file: transformer, a single block's proj_out / proj_mlp / norm.linear
    among its layers, + CLIP-L + T5; the transformer and CLIP-L part in the diffusers layout; the
    T5 part as {T5 module name: its weight change [out, in]})."""
    gen = torch.Generator().manual_seed(seed)

    def pick(name: str) -> bool:
        single = name.startswith("single_transformer_blocks.0.") and name.endswith(
            ("proj_out", "proj_mlp", "norm.linear")
        )
        return _denoiser_pick(name) or single or name.endswith("ff.net.0.proj")

    transformer = _layers(pipe.transformer, gen, 0.3, pick)
    te1 = _layers(pipe.text_encoder, gen, 0.3, rename=_clip_name)
    t5 = _layers(pipe.text_encoder_2, gen, 0.3)
    assert any(n.endswith("DenseReluDense.wi_1") for n in t5)
    theirs = (
        _onetrainer("lora_transformer_", transformer)
        | _onetrainer("lora_te1_", te1)
        | _onetrainer("lora_te2_", t5)
    )
    ours = _diffusers("transformer", transformer) | _diffusers("text_encoder", te1)
    return theirs, ours, {name: 2 * up @ down for name, (down, up) in t5.items()}


def chroma_files(
    pipe, prefix: str = "lora_te_", seed: int = 0
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(OneTrainer's Chroma file: transformer attention / MLP layers + its one text encoder, T5,
    under `prefix` (OneTrainer's Chroma wrapper writes `lora_te_`; ComfyUI's Chroma name is
    `lora_te1_`); the transformer part in the diffusers layout; the T5 part as {T5 module name:
    its weight change [out, in]})."""
    gen = torch.Generator().manual_seed(seed)
    transformer = _layers(pipe.transformer, gen, 0.3, _denoiser_pick)
    t5 = _layers(pipe.text_encoder, gen, 0.3)
    assert transformer and any(n.endswith("DenseReluDense.wi_1") for n in t5)
    theirs = _onetrainer("lora_transformer_", transformer) | _onetrainer(prefix, t5)
    ours = _diffusers("transformer", transformer)
    return theirs, ours, {name: 2 * up @ down for name, (down, up) in t5.items()}
