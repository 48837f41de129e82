"""FLUX.2 module names: diffusers (Flux2Transformer2DModel, what peft trains) <-> the BFL
checkpoint layout (what kohya-style files and ComfyUI address), for FLUX.2 dev and klein alike.

The table restates diffusers' own single-file conversion
(loaders/single_file_utils.convert_flux2_transformer_checkpoint_to_diffusers) and kohya loader
(lora_conversion_utils._convert_kohya_flux2_lora_to_diffusers). Unlike FLUX.1, the single
blocks are already fused in diffusers (`attn.to_qkv_mlp_proj` is BFL's `linear1`), so only the
dual blocks' q/k/v triples are fused linears here (FUSED: three equal parts, in row order).
ComfyUI's FLUX.2 model holds the BFL names, so `lora_unet_<BFL name>` keys reach every weight.
"""

from __future__ import annotations

import re

from lorastudio.errors import ConfigError, FieldProblem

# fused BFL linear -> its diffusers parts, in row order; "*" is the dual-block index
FUSED: dict[str, tuple[str, ...]] = {
    "double_blocks.*.img_attn.qkv": ("attn.to_q", "attn.to_k", "attn.to_v"),
    "double_blocks.*.txt_attn.qkv": ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
}
_DOUBLE = {
    "attn.to_out.0": "img_attn.proj",
    "attn.to_add_out": "txt_attn.proj",
    "ff.linear_in": "img_mlp.0",
    "ff.linear_out": "img_mlp.2",
    "ff_context.linear_in": "txt_mlp.0",
    "ff_context.linear_out": "txt_mlp.2",
}
_SINGLE = {"attn.to_qkv_mlp_proj": "linear1", "attn.to_out": "linear2"}
# the blocks' q / k RMSNorms (FLUX.1's and FLUX.2's alike: diffusers name -> BFL name), a 1-D
# weight each: no LoRA targets them, but ComfyUI's trainer node writes a `.diff` for each (its
# QKNorm is a comfy.ops RMSNorm), which generation merges: read by from_original only
QK_NORMS_DOUBLE = {
    "attn.norm_q": "img_attn.norm.query_norm",
    "attn.norm_k": "img_attn.norm.key_norm",
    "attn.norm_added_q": "txt_attn.norm.query_norm",
    "attn.norm_added_k": "txt_attn.norm.key_norm",
}
QK_NORMS_SINGLE = {"attn.norm_q": "norm.query_norm", "attn.norm_k": "norm.key_norm"}
_TOP = {
    "x_embedder": "img_in",
    "context_embedder": "txt_in",
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin",
    "norm_out.linear": "final_layer.adaLN_modulation.1",  # (scale, shift) rows swapped, as FLUX.1
    "proj_out": "final_layer.linear",
}
SWAPPED = "final_layer.adaLN_modulation.1"
# multi-word BFL names kept whole when re-dotting kohya's underscored names (names.undot)
WORDS: tuple[str, ...] = (
    "double_blocks", "single_blocks", "img_attn", "txt_attn", "img_mlp", "txt_mlp", "img_in", "txt_in",
    "time_in", "guidance_in", "in_layer", "out_layer", "final_layer", "adaLN_modulation",
    "double_stream_modulation_img", "double_stream_modulation_txt", "single_stream_modulation",
)  # fmt: skip


def _unsupported(name: str) -> ConfigError:
    return ConfigError(
        [FieldProblem("lora_format", f"flux2: no kohya name is known for the LoRA layer {name!r}")]
    )


def to_original(name: str) -> tuple[str, int | None]:
    """diffusers FLUX.2 module name -> (BFL name, part index within a fused linear or None).
    Raises ConfigError for a module with no BFL name."""
    if name in _TOP:
        return _TOP[name], None
    m = re.fullmatch(r"(transformer_blocks|single_transformer_blocks)\.(\d+)\.(.+)", name)
    if m:
        double = m.group(1) == "transformer_blocks"
        prefix = f"{'double' if double else 'single'}_blocks.{m.group(2)}."
        rest = m.group(3)
        if double:
            for fused, parts in FUSED.items():
                if rest in parts:
                    return prefix + fused.split(".*.")[1], parts.index(rest)
        table = _DOUBLE if double else _SINGLE
        if rest in table:
            return prefix + table[rest], None
    raise _unsupported(name)


def from_original(name: str) -> list[str]:
    """BFL module name -> its diffusers module names (three for a fused q/k/v, in row order; a
    q / k norm too: QK_NORMS_*). Raises ConfigError for an unknown name."""
    top = {v: k for k, v in _TOP.items()}
    if name in top:
        return [top[name]]
    m = re.fullmatch(r"(double|single)_blocks\.(\d+)\.(.+)", name)
    if m:
        double = m.group(1) == "double"
        prefix = f"{'transformer_blocks' if double else 'single_transformer_blocks'}.{m.group(2)}."
        fused = FUSED.get(f"double_blocks.*.{m.group(3)}") if double else None
        if fused is not None:
            return [prefix + p for p in fused]
        own = (_DOUBLE | QK_NORMS_DOUBLE) if double else (_SINGLE | QK_NORMS_SINGLE)
        table = {v: k for k, v in own.items()}
        if m.group(3) in table:
            return [prefix + table[m.group(3)]]
    raise _unsupported(name)
