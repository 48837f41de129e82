"""Which families a LoRA of `transformer_blocks.N.attn.*` layers can be for, from its header alone
(no torch): lora/header.check_lora_header's judgement when no key only one family has is there.

FLUX.1's and FLUX.2's double blocks and Qwen-Image's blocks name their joint attention alike in
diffusers' layout (`transformer_blocks.N.attn.to_q` ... `add_q_proj` ... `to_add_out`, also
ComfyUI's and kohya's names of Qwen-Image), and Krea 2's blocks the same without the text
stream's projections: a file of attention layers only carries no name of its own. What does tell
them apart is what their released checkpoints are: how many such blocks (a block index past the
last one cannot be that family's) and how wide their attention is (the down matrix's input, the
up matrix's output), and whether the blocks have a text stream (`add_*_proj`, `to_add_out`: the
joint families, never Krea 2). A width no released checkpoint has (the tiny test models) says
nothing; depth still does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol

# a top-level block's attention projection (diffusers', ComfyUI's `diffusion_model.` or kohya's
# flat `lora_unet_` / `lora_transformer_` spelling); not SDXL's attn1 / attn2 (under down_blocks)
# nor single_transformer_blocks (FLUX's single blocks, a key kind of their own)
_ATTN = re.compile(
    r"(?:^|\.|(?<=lora_unet_)|(?<=lora_transformer_))transformer_blocks[._](?P<block>\d+)[._]attn[._]"
    r"(?P<proj>to_q|to_k|to_v|to_out|add_q_proj|add_k_proj|add_v_proj|to_add_out)(?=[._]|$)"
)
_TEXT_STREAM = frozenset({"add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"})
_DOWN = re.compile(r"[._](lora_A|lora_down|lora\.down)\.weight$")  # [r, in]
_UP = re.compile(r"[._](lora_B|lora_up|lora\.up)\.weight$")  # [out, r]

# kind -> (families that take its files, joint (a text stream), ((blocks, attention width) of
# each released checkpoint)): FLUX.1 dev / schnell / Kontext and Chroma 19 double blocks of 24 x
# 128; FLUX.2 dev 8 of 48 x 128, klein 4B 5 of 24 x 128, klein 9B 8 of 32 x 128; Qwen-Image (and
# Edit) 60 of 24 x 128; Krea 2 28 single-stream blocks of 48 x 128
KINDS: dict[str, tuple[frozenset[str], bool, tuple[tuple[int, int], ...]]] = {
    "flux": (frozenset({"flux", "flux-kontext", "chroma"}), True, ((19, 3072),)),
    "flux2": (frozenset({"flux2", "flux2-klein"}), True, ((8, 6144), (5, 3072), (8, 4096))),
    "qwen-image": (frozenset({"qwen-image", "qwen-image-edit"}), True, ((60, 3072),)),
    "krea2": (frozenset({"krea2"}), False, ((28, 6144),)),
}
RELEASED_WIDTHS = frozenset(w for _, _, shapes in KINDS.values() for _, w in shapes)


class _Shaped(Protocol):
    shape: tuple[int, ...]


def block_attention_kinds(tensors: Mapping[str, _Shaped]) -> tuple[list[str], frozenset[str], str] | None:
    """(the kinds of KINDS a file of these tensors can be for, in KINDS' order; every family
    those kinds take; the evidence, for a message) when it holds top-level block attention
    layers, else None. Kinds whose released checkpoints cannot hold it (a block past their last,
    another width, a text stream they lack) are left out; when none is left, every kind whose
    names these are is given (a checkpoint unknown here: the names still say which)."""
    blocks: set[int] = set()
    projections: set[str] = set()
    widths: set[int] = set()
    example = ""
    for name, info in tensors.items():
        match = _ATTN.search(name)
        if match is None:
            continue
        block, proj = int(match["block"]), match["proj"]
        if not example or block > max(blocks):
            example = name
        blocks.add(block)
        projections.add(proj)
        if proj in ("to_q", "to_k", "to_v") and _DOWN.search(name) and len(info.shape) >= 2:
            widths.add(info.shape[1])
        elif proj in ("to_q", "to_k", "to_v", "to_out") and _UP.search(name) and len(info.shape) >= 2:
            widths.add(info.shape[0])
    if not blocks:
        return None
    last = max(blocks)
    text_stream = bool(projections & _TEXT_STREAM)
    width = next(iter(widths)) if len(widths) == 1 and widths <= RELEASED_WIDTHS else None
    named = [k for k, (_, joint, _) in KINDS.items() if joint or not text_stream]
    fits = [kind for kind in named if any(last < depth and width in (None, w) for depth, w in KINDS[kind][2])]
    evidence = f"it has attention layers of blocks up to {last}, such as {example[:120]!r}"
    if width is not None:
        evidence += f", {width} wide"
    if text_stream:
        evidence += ", with a text stream (add_q_proj ...)"
    kinds = fits or named
    families = frozenset(f for kind in kinds for f in KINDS[kind][0])
    return kinds, families, evidence
