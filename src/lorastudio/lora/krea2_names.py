"""Krea 2 module names: diffusers (what peft trains) <-> the original checkpoint's (what
ComfyUI's Krea 2 model holds, comfy.ldm.krea2: `blocks.N.attn.wq`, `txtfusion...`, `first`,
`last.linear`). A Krea 2 LoRA file for ComfyUI is `diffusion_model.<original name>.lora_A /
.lora_B` (the Krea 2 reference trainer's layout, which diffusers' Krea2LoraLoaderMixin reads
too; see lora/convert.py). One-to-one: no fused linears.

    krea2_to_original("transformer_blocks.3.attn.to_q") == "blocks.3.attn.wq"
"""

from __future__ import annotations

import re

# inside a block (main, text-fusion layer-wise and refiner blocks alike)
_BLOCK = {
    "attn.to_q": "attn.wq",
    "attn.to_k": "attn.wk",
    "attn.to_v": "attn.wv",
    "attn.to_gate": "attn.gate",
    "attn.to_out.0": "attn.wo",
    "ff.gate": "mlp.gate",
    "ff.up": "mlp.up",
    "ff.down": "mlp.down",
}
_GROUPS = {
    "transformer_blocks": "blocks",
    "text_fusion.layerwise_blocks": "txtfusion.layerwise_blocks",
    "text_fusion.refiner_blocks": "txtfusion.refiner_blocks",
}
_TOP = {
    "img_in": "first",
    "time_embed.linear_1": "tmlp.0",
    "time_embed.linear_2": "tmlp.2",
    "time_mod_proj": "tproj.1",
    "txt_in.linear_1": "txtmlp.1",
    "txt_in.linear_2": "txtmlp.3",
    "text_fusion.projector": "txtfusion.projector",
    "final_layer.linear": "last.linear",
}
# multi-word names kept whole when re-dotting kohya's underscored names (names.undot)
WORDS: tuple[str, ...] = ("layerwise_blocks", "refiner_blocks")


def krea2_to_original(name: str) -> str | None:
    """diffusers Krea 2 module name -> original name, or None when it has none."""
    if name in _TOP:
        return _TOP[name]
    m = re.fullmatch(
        r"(transformer_blocks|text_fusion\.layerwise_blocks|text_fusion\.refiner_blocks)\.(\d+)\.(.+)", name
    )
    if m and m.group(3) in _BLOCK:
        return f"{_GROUPS[m.group(1)]}.{m.group(2)}.{_BLOCK[m.group(3)]}"
    return None


def krea2_from_original(name: str) -> str | None:
    """Original Krea 2 module name -> diffusers name (inverse of krea2_to_original), or None."""
    top = {v: k for k, v in _TOP.items()}
    if name in top:
        return top[name]
    groups = {v: k for k, v in _GROUPS.items()}
    block = {v: k for k, v in _BLOCK.items()}
    m = re.fullmatch(r"(blocks|txtfusion\.layerwise_blocks|txtfusion\.refiner_blocks)\.(\d+)\.(.+)", name)
    if m and m.group(3) in block:
        return f"{groups[m.group(1)]}.{m.group(2)}.{block[m.group(3)]}"
    return None
