"""One LyCORIS layer's tensors cut by output rows (training/adapters/init_lycoris.py): the layer of a fused
checkpoint linear (FLUX.1's `img_attn.qkv`, `linear1`; FLUX.2's q, k, v) as the tensors of each
diffusers layer it patches, and a layer whose weight holds its two row halves in the other order
(FLUX's final adaLN) as its diffusers layer's. Pure tensor functions; no model.

A row block of each kind's weight change is again one of its kind, exactly (ComfyUI's rules,
lora/lycoris.comfy_delta; `alpha` and the rank are kept, so each block's scale is the layer's):
  LoHa  (w1_a @ w1_b) * (w2_a @ w2_b): the rows of w1_a and w2_a (w1_b, w2_b shared);
  LoRA / DoRA  up @ down, DoRA's dora_scale one per output row: the rows of up and dora_scale
        (down shared; the DoRA norm is per output row, so a block's is its own rows');
  LoKr  kron(w1, w2) [a1 * a2, ...], row i1 * a2 + i2: a block of rows [s, e) is kron(w1[s/a2 :
        e/a2], w2) only where a2 divides s and e (w1's rows: w1 or, decomposed, w1_a). A block
        that cuts through w2's rows is no Kronecker product of the layer's factors: refused.
Tucker / mid tensors (hada_t1, lokr_t2, lora_mid) are refused, as generation refuses them.

Why hand-written: LyCORIS and peft split no factors; ComfyUI merges a fused layer whole.
"""

from __future__ import annotations

import torch

from lorastudio.lora.lycoris import LycorisError

_TUCKER = frozenset({"hada_t1", "hada_t2", "lokr_t2", "lora_mid.weight"})
_ROWS = ("hada_w1_a", "hada_w2_a", "lora_up.weight", "dora_scale")  # the factors whose rows are the change's


def _blocks(sizes: list[int], swapped: bool) -> list[list[tuple[int, int]]]:
    """Each part's rows of the fused weight as (start, end) runs: the parts stacked in order; a
    `swapped` weight (one part) holds its second half first, so the part is [h, n) then [0, h)."""
    if swapped:
        total = sum(sizes)
        if len(sizes) != 1 or total % 2:
            raise LycorisError(f"a weight of swapped halves of rows {sizes}")
        half = total // 2
        return [[(half, total), (0, half)]]
    out, start = [], 0
    for size in sizes:
        out.append([(start, start + size)])
        start += size
    return out


def _take(value: torch.Tensor, runs: list[tuple[int, int]], unit: int = 1) -> torch.Tensor:
    """The rows `runs` (in units of `unit` rows: LoKr's w2 height) of `value`, concatenated."""
    return torch.cat([value[s // unit : e // unit] for s, e in runs], dim=0)


def split_rows(
    parts: dict[str, torch.Tensor], sizes: list[int], swapped: bool = False
) -> list[dict[str, torch.Tensor]]:
    """The tensors of each of the layers (of `sizes` output rows, in the fused weight's order)
    that one LyCORIS layer's `parts` patch together; `swapped`: its one layer's row halves are
    exchanged in the file's weight. Raises LycorisError naming why a block is no layer of its kind
    (a Tucker tensor, a size that is not the layer's, a LoKr block across w2's rows)."""
    tucker = sorted(set(parts) & _TUCKER)
    if tucker:
        raise LycorisError(f"Tucker-decomposed tensors ({', '.join(tucker)}) cannot be cut into its layers")
    runs = _blocks(sizes, swapped)
    total = sum(sizes)
    if "lokr_w1" in parts or "lokr_w1_a" in parts:
        return _lokr(parts, runs, total)
    rows = [k for k in _ROWS if k in parts]
    if not rows:
        raise LycorisError(f"no LoHa / LoRA factor among {sorted(parts)}")
    for key in rows:
        if parts[key].shape[0] != total:
            raise LycorisError(f"its {key} has {parts[key].shape[0]} rows, its layers {total} ({sizes})")
    return [{k: (_take(v, run) if k in rows else v) for k, v in parts.items()} for run in runs]


def _lokr(
    parts: dict[str, torch.Tensor], runs: list[list[tuple[int, int]]], total: int
) -> list[dict[str, torch.Tensor]]:
    """LoKr: each block's w1 rows (module docstring), or why there is none."""
    w1 = "lokr_w1" if "lokr_w1" in parts else "lokr_w1_a"
    w2 = parts["lokr_w2"] if "lokr_w2" in parts else parts["lokr_w2_a"]
    height = int(w2.shape[0])  # a2: the rows of one w1 row's block
    if parts[w1].shape[0] * height != total:
        raise LycorisError(
            f"its Kronecker product has {parts[w1].shape[0] * height} rows, its layers {total}"
        )
    cuts = sorted({x for run in runs for span in run for x in span})
    if any(x % height for x in cuts):
        raise LycorisError(
            f"its Kronecker product's rows come in blocks of {height} (w2's height), and its layers' "
            f"boundaries ({', '.join(str(x) for x in cuts[1:-1])}) cut through them: no LoKr of the layer's "
            "factors holds each layer's part"
        )
    return [{k: (_take(v, run, height) if k == w1 else v) for k, v in parts.items()} for run in runs]
