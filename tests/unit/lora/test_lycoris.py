"""lora/lycoris.py on synthetic state dicts: peft's LoHa / LoKr / DoRA tensors under the LyCORIS
names ComfyUI reads, with the scales that make ComfyUI's merge equal peft's (LoKr with two full
factors folds alpha / r into lokr_w1), and the key check's verdicts."""

from __future__ import annotations

import pytest
import torch

from lorastudio.lora.lycoris import (
    LycorisError,
    check_lycoris_keys,
    comfy_delta,
    delta_shape,
    module_key,
    peft_to_lycoris,
)

G = torch.Generator().manual_seed(0)
M = "blocks.0.attn.to_q"  # a diffusers module name
X = "lycoris_blocks_0_attn_to_q"


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G)


def test_loha_keeps_peft_names_and_its_scale():
    t = {
        f"{M}.hada_w1_a": _r(8, 2),
        f"{M}.hada_w1_b": _r(2, 6),
        f"{M}.hada_w2_a": _r(8, 2),
        f"{M}.hada_w2_b": _r(2, 6),
    }
    out = peft_to_lycoris(t, "loha", {M: (2, 3.0)})
    assert module_key(M) == X and set(out) == {f"{X}.{k.rsplit('.', 1)[1]}" for k in t} | {f"{X}.alpha"}
    peft = (
        (t[f"{M}.hada_w1_a"] @ t[f"{M}.hada_w1_b"]) * (t[f"{M}.hada_w2_a"] @ t[f"{M}.hada_w2_b"]) * (3.0 / 2)
    )
    parts = {k.removeprefix(X + "."): v for k, v in out.items()}
    torch.testing.assert_close(comfy_delta(parts), peft)
    assert delta_shape(parts) == (8, 6)


@pytest.mark.parametrize("low_rank_w2", [True, False])
def test_lokr_scale_matches_comfyui_with_and_without_a_low_rank_factor(low_rank_w2):
    w1 = _r(2, 3)
    w2 = (
        {f"{M}.lokr_w2_a": _r(4, 2), f"{M}.lokr_w2_b": _r(2, 5)}
        if low_rank_w2
        else {f"{M}.lokr_w2": _r(4, 5)}
    )
    t = {f"{M}.lokr_w1": w1, **w2}
    rank, alpha = 2, 8.0
    w2_full = w2[f"{M}.lokr_w2_a"] @ w2[f"{M}.lokr_w2_b"] if low_rank_w2 else w2[f"{M}.lokr_w2"]
    peft = torch.kron(w1, w2_full) * (alpha / rank)  # peft: scaling = alpha / r always
    out = peft_to_lycoris(t, "lokr", {M: (rank, alpha)})
    parts = {k.removeprefix(X + "."): v for k, v in out.items()}
    torch.testing.assert_close(comfy_delta(parts), peft)
    if not low_rank_w2:  # ComfyUI applies no alpha here: the scale is folded into w1
        assert float(parts["alpha"]) == rank and not torch.equal(parts["lokr_w1"], w1)
    assert delta_shape(parts) == (8, 15)


def test_dora_renames_to_comfyui_keys_with_the_given_scale():
    t = {f"{M}.lora_A.weight": _r(2, 6), f"{M}.lora_B.weight": _r(8, 2), f"{M}.lora_magnitude_vector": _r(8)}
    scale = _r(8, 1)
    out = peft_to_lycoris(t, "dora", {M: (2, 2.0)}, {M: scale})
    assert set(out) == {f"{X}.lora_down.weight", f"{X}.lora_up.weight", f"{X}.dora_scale", f"{X}.alpha"}
    assert torch.equal(out[f"{X}.dora_scale"], scale)
    with pytest.raises(LycorisError, match="DoRA scale"):
        peft_to_lycoris(t, "dora", {M: (2, 2.0)})


def test_foreign_keys_and_missing_scales_are_errors():
    with pytest.raises(LycorisError, match="not a parameter of a peft loha"):
        peft_to_lycoris({f"{M}.lora_A.weight": _r(2, 6)}, "loha", {M: (2, 2.0)})
    with pytest.raises(LycorisError, match="no rank / alpha"):
        peft_to_lycoris({f"{M}.lokr_w1": _r(2, 2), f"{M}.lokr_w2": _r(2, 2)}, "lokr", {})
    with pytest.raises(LycorisError, match="no LyCORIS layout"):
        peft_to_lycoris({}, "lora", {})


def test_the_key_check_names_unknown_modules_wrong_shapes_and_foreign_keys():
    shapes = {f"{X}.lokr_w1": (2, 3), f"{X}.lokr_w2": (4, 5), f"{X}.alpha": ()}
    assert check_lycoris_keys(shapes, {X: (8, 15)}).ok
    wrong = check_lycoris_keys(shapes, {X: (8, 16)})
    assert wrong.mismatched == [f"{X}: patch (8, 15) vs weight (8, 16)"]
    unknown = check_lycoris_keys(shapes, {"lycoris_other": (8, 15)})
    assert unknown.unconsumed == sorted(shapes)
    foreign = check_lycoris_keys({**shapes, f"{X}.lokr_w9": (1,)}, {X: (8, 15)})
    assert not foreign.ok and "lokr_w9" in foreign.unconsumed[0]
    dora = {f"{X}.lora_up.weight": (8, 2), f"{X}.lora_down.weight": (2, 15), f"{X}.dora_scale": (1, 15)}
    assert check_lycoris_keys(dora, {X: (8, 15)}).mismatched  # an input-axis scale is not what we write
