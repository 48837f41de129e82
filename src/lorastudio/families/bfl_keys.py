"""FLUX.1 / Chroma transformer weights: Black Forest Labs' original key layout -> diffusers'.

Hand-written because diffusers 0.42.1's converters for these layouts
(`convert_flux_transformer_checkpoint_to_diffusers`, `convert_chroma_...`) split the single
blocks' fused `linear1` at FLUX.1's hard-coded width (3072 / 12288) and fail on any other; this
one reads the widths from the transformer's config, and gives, at FLUX.1's width, exactly
diffusers' result (tests/unit/families/test_bfl_keys.py compares them key by key). The result is
handed to diffusers' `from_single_file`, which then loads it as it is.

The map is data: RENAMES (BFL module -> diffusers module, regex) for one-to-one tensors, FUSED
for the fused projections (split along the output axis), SWAPPED for the final AdaLN, whose
(shift, scale) halves diffusers stores as (scale, shift).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

PREFIX = "model.diffusion_model."  # ComfyUI's saved transformer files

RENAMES: tuple[tuple[str, str], ...] = (
    (r"time_in\.in_layer", "time_text_embed.timestep_embedder.linear_1"),
    (r"time_in\.out_layer", "time_text_embed.timestep_embedder.linear_2"),
    (r"vector_in\.in_layer", "time_text_embed.text_embedder.linear_1"),
    (r"vector_in\.out_layer", "time_text_embed.text_embedder.linear_2"),
    (r"guidance_in\.in_layer", "time_text_embed.guidance_embedder.linear_1"),
    (r"guidance_in\.out_layer", "time_text_embed.guidance_embedder.linear_2"),
    (r"txt_in", "context_embedder"),
    (r"img_in", "x_embedder"),
    (r"final_layer\.linear", "proj_out"),
    (r"(distilled_guidance_layer\.(?:in|out)_proj)", r"\1"),
    (r"distilled_guidance_layer\.layers\.(\d+)\.in_layer", r"distilled_guidance_layer.layers.\1.linear_1"),
    (r"distilled_guidance_layer\.layers\.(\d+)\.out_layer", r"distilled_guidance_layer.layers.\1.linear_2"),
    (r"distilled_guidance_layer\.norms\.(\d+)", r"distilled_guidance_layer.norms.\1"),
    (r"double_blocks\.(\d+)\.img_mod\.lin", r"transformer_blocks.\1.norm1.linear"),
    (r"double_blocks\.(\d+)\.txt_mod\.lin", r"transformer_blocks.\1.norm1_context.linear"),
    (r"double_blocks\.(\d+)\.img_attn\.norm\.query_norm", r"transformer_blocks.\1.attn.norm_q"),
    (r"double_blocks\.(\d+)\.img_attn\.norm\.key_norm", r"transformer_blocks.\1.attn.norm_k"),
    (r"double_blocks\.(\d+)\.txt_attn\.norm\.query_norm", r"transformer_blocks.\1.attn.norm_added_q"),
    (r"double_blocks\.(\d+)\.txt_attn\.norm\.key_norm", r"transformer_blocks.\1.attn.norm_added_k"),
    (r"double_blocks\.(\d+)\.img_mlp\.0", r"transformer_blocks.\1.ff.net.0.proj"),
    (r"double_blocks\.(\d+)\.img_mlp\.2", r"transformer_blocks.\1.ff.net.2"),
    (r"double_blocks\.(\d+)\.txt_mlp\.0", r"transformer_blocks.\1.ff_context.net.0.proj"),
    (r"double_blocks\.(\d+)\.txt_mlp\.2", r"transformer_blocks.\1.ff_context.net.2"),
    (r"double_blocks\.(\d+)\.img_attn\.proj", r"transformer_blocks.\1.attn.to_out.0"),
    (r"double_blocks\.(\d+)\.txt_attn\.proj", r"transformer_blocks.\1.attn.to_add_out"),
    (r"single_blocks\.(\d+)\.modulation\.lin", r"single_transformer_blocks.\1.norm.linear"),
    (r"single_blocks\.(\d+)\.norm\.query_norm", r"single_transformer_blocks.\1.attn.norm_q"),
    (r"single_blocks\.(\d+)\.norm\.key_norm", r"single_transformer_blocks.\1.attn.norm_k"),
    (r"single_blocks\.(\d+)\.linear2", r"single_transformer_blocks.\1.proj_out"),
)
# fused BFL module -> its diffusers parts, in order along the output axis ("mlp": the MLP width)
FUSED: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"double_blocks\.(\d+)\.img_attn\.qkv", (r"transformer_blocks.\1.attn.to_q", r"transformer_blocks.\1.attn.to_k", r"transformer_blocks.\1.attn.to_v")),
    (r"double_blocks\.(\d+)\.txt_attn\.qkv", (r"transformer_blocks.\1.attn.add_q_proj", r"transformer_blocks.\1.attn.add_k_proj", r"transformer_blocks.\1.attn.add_v_proj")),
    (r"single_blocks\.(\d+)\.linear1", (r"single_transformer_blocks.\1.attn.to_q", r"single_transformer_blocks.\1.attn.to_k", r"single_transformer_blocks.\1.attn.to_v", r"single_transformer_blocks.\1.proj_mlp")),
)  # fmt: skip
SWAPPED = (r"final_layer\.adaLN_modulation\.1", "norm_out.linear")
MLP_RATIO = 4.0  # FLUX.1's and Chroma's single blocks


def _param(name: str) -> str:
    """BFL's norm `scale` is diffusers' `weight`."""
    return "weight" if name == "scale" else name


def bfl_to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A FLUX.1 / Chroma transformer state dict in BFL's layout (keys optionally under
    `model.diffusion_model.`) -> diffusers' FluxTransformer2DModel / ChromaTransformer2DModel
    keys, widths from `config` (num_attention_heads x attention_head_dim). Keys of no known
    module (a bundled VAE or text encoder) are left out; a fused tensor whose rows are not
    3 x inner (qkv) or 3 x inner + mlp (linear1) raises ValueError naming it."""
    inner = int(config["num_attention_heads"]) * int(config["attention_head_dim"])
    widths = {3: (inner,) * 3, 4: (inner, inner, inner, int(inner * MLP_RATIO))}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module, _, param = key.removeprefix(PREFIX).rpartition(".")
        for pattern, targets in FUSED:
            if re.fullmatch(pattern, module):
                sizes = widths[len(targets)]
                if value.shape[0] != sum(sizes):
                    raise ValueError(f"{key}: {value.shape[0]} rows, expected {' + '.join(map(str, sizes))}")
                for target, part in zip(targets, torch.split(value, sizes, dim=0), strict=True):
                    out[f"{re.sub(pattern, target, module)}.{param}"] = part
                break
        else:
            if re.fullmatch(SWAPPED[0], module):
                shift, scale = value.chunk(2, dim=0)
                out[f"{SWAPPED[1]}.{param}"] = torch.cat([scale, shift], dim=0)
                continue
            for pattern, target in RENAMES:
                if re.fullmatch(pattern, module):
                    out[f"{re.sub(pattern, target, module)}.{_param(param)}"] = value
                    break
    return out
