"""training/adapters/init_lycoris_rows.split_rows: each piece of a LyCORIS layer cut by output rows has, by
ComfyUI's rule (lora/lycoris.comfy_delta; up @ down x alpha / rank), exactly its rows of the
layer's change; a layer of swapped halves gives its layer the halves exchanged back. Pure, tiny."""

from __future__ import annotations

import pytest
import torch

from lorastudio.lora.lycoris import LycorisError, comfy_delta
from lorastudio.training.adapters.init_lycoris_rows import split_rows


def _delta(parts: dict[str, torch.Tensor]) -> torch.Tensor:
    if "lora_up.weight" in parts:
        up, down = parts["lora_up.weight"], parts["lora_down.weight"]
        return up @ down * float(parts["alpha"]) / down.shape[0]  # [out, in]
    return comfy_delta(parts)


def _parts(kind: str, rows: int, cols: int = 6, r: int = 2) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    if kind == "loha":
        return {"hada_w1_a": torch.randn(rows, r, generator=g), "hada_w1_b": torch.randn(r, cols, generator=g),
                "hada_w2_a": torch.randn(rows, r, generator=g), "hada_w2_b": torch.randn(r, cols, generator=g),
                "alpha": torch.tensor(3.0)}  # fmt: skip
    if kind == "dora":
        return {"lora_up.weight": torch.randn(rows, r, generator=g), "lora_down.weight": torch.randn(r, cols, generator=g),
                "alpha": torch.tensor(3.0), "dora_scale": torch.rand(rows, 1, generator=g)}  # fmt: skip
    return {"lokr_w1": torch.randn(rows // 4, 2, generator=g), "lokr_w2_a": torch.randn(4, r, generator=g),
            "lokr_w2_b": torch.randn(r, cols // 2, generator=g), "alpha": torch.tensor(3.0)}  # fmt: skip


@pytest.mark.parametrize("kind", ["loha", "dora", "lokr"])
def test_each_piece_is_its_rows_of_the_change(kind):
    parts = _parts(kind, 24)
    whole = _delta(parts)  # [24, 6]
    pieces = split_rows(parts, [8, 8, 8])
    for i, piece in enumerate(pieces):
        torch.testing.assert_close(_delta(piece), whole[8 * i : 8 * (i + 1)])
        if kind == "dora":
            torch.testing.assert_close(piece["dora_scale"], parts["dora_scale"][8 * i : 8 * (i + 1)])
    (swapped,) = split_rows(parts, [24], swapped=True)
    torch.testing.assert_close(_delta(swapped), torch.cat([whole[12:], whole[:12]]))


def test_a_lokr_cut_through_its_blocks_and_a_tucker_layer_are_refused():
    with pytest.raises(LycorisError, match="cut through them"):
        split_rows(_parts("lokr", 24), [6, 18])  # blocks of 4 rows: 6 cuts one
    with pytest.raises(LycorisError, match="Tucker"):
        split_rows(_parts("loha", 24) | {"hada_t1": torch.ones(2, 2, 3, 3)}, [12, 12])
    with pytest.raises(LycorisError, match="rows"):
        split_rows(_parts("loha", 24), [8, 8])  # 16 rows asked of a layer of 24
