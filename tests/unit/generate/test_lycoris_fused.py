"""Generation with a LyCORIS factorisation (LoHa, LoKr, DoRA) of a fused FLUX layer under kohya's
names: merged into the diffusers parts' weights as ComfyUI patches its fused checkpoint weight
(generate/lycoris_names, generate/lycoris_patch; RELIABILITY fix 119)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from tests.unit.generate.test_generate import _img

from lorastudio.generate import apply_loras, load_pipeline


def _fused_parts(kind: str, rows: int, inp: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if kind == "loha":
        return {
            "hada_w1_a": 0.3 * torch.randn(rows, 4, generator=g),
            "hada_w1_b": 0.3 * torch.randn(4, inp, generator=g),
            "hada_w2_a": 0.3 * torch.randn(rows, 4, generator=g),
            "hada_w2_b": 0.3 * torch.randn(4, inp, generator=g),
            "alpha": torch.tensor(2.0),
        }
    if kind == "lokr":
        return {
            "lokr_w1": torch.randn(2, 2, generator=g),
            "lokr_w2": 0.1 * torch.randn(rows // 2, inp // 2, generator=g),
        }
    return {  # dora
        "lora_down.weight": 0.3 * torch.randn(4, inp, generator=g),
        "lora_up.weight": 0.3 * torch.randn(rows, 4, generator=g),
        "alpha": torch.tensor(8.0),
        "dora_scale": torch.rand(rows, 1, generator=g) + 1,
    }


def _by_hand(kind: str, parts: dict[str, torch.Tensor], fused: torch.Tensor) -> torch.Tensor:
    """The patched fused weight [rows, in] at strength 1, computed here from the LyCORIS
    definitions (ComfyUI's weight_adapter rules), not by the code under test."""
    if kind == "loha":  # (w1a w1b) * (w2a w2b) * alpha / rank
        w1 = parts["hada_w1_a"] @ parts["hada_w1_b"]
        return fused + w1 * (parts["hada_w2_a"] @ parts["hada_w2_b"]) * (2.0 / 4)
    if kind == "lokr":  # kron(w1, w2); full factors: no alpha scale
        return fused + torch.kron(parts["lokr_w1"], parts["lokr_w2"])
    up, down = parts["lora_up.weight"], parts["lora_down.weight"]
    merged = fused + up @ down * (8.0 / 4)  # [rows, in]
    return merged * parts["dora_scale"] / fused.norm(dim=1, keepdim=True)  # magnitude per output row


@pytest.mark.parametrize("kind", ["loha", "lokr", "dora"])
def test_a_lycoris_file_of_fused_flux_layers_merges_into_their_parts(flux_pipe, tmp_path, kind):
    """A LyCORIS factorisation of a fused FLUX.1 linear under kohya's names (`img_attn_qkv`,
    `txt_attn.qkv`, `linear1`; the final adaLN, its halves swapped) was refused (fix 85). As
    ComfyUI patches its fused checkpoint weight, generation patches the parts' weights stacked by
    rows and splits the result: the image equals the same change merged by hand into the parts,
    and strength 0.5 gives half the change (LoHa, LoKr) or half the way to the DoRA weight."""
    t = flux_pipe.transformer
    fused_layers = {
        "lora_unet_double_blocks_0_img_attn_qkv": [t.transformer_blocks[0].attn.to_q, t.transformer_blocks[0].attn.to_k, t.transformer_blocks[0].attn.to_v],
        "diffusion_model.double_blocks.0.txt_attn.qkv": [t.transformer_blocks[0].attn.add_q_proj, t.transformer_blocks[0].attn.add_k_proj, t.transformer_blocks[0].attn.add_v_proj],
        "lora_unet_single_blocks_1_linear1": [t.single_transformer_blocks[1].attn.to_q, t.single_transformer_blocks[1].attn.to_k, t.single_transformer_blocks[1].attn.to_v, t.single_transformer_blocks[1].proj_mlp],
        "lora_unet_final_layer_adaLN_modulation_1": [t.norm_out.linear],
    }  # fmt: skip
    apply_loras(flux_pipe, [])
    base = {id(m): m.weight.detach().clone() for ms in fused_layers.values() for m in ms}
    tensors, want = {}, {}
    for seed, (layer, modules) in enumerate(fused_layers.items()):
        stacked = torch.cat([base[id(m)] for m in modules])  # [rows, in], the checkpoint's row order
        swapped = layer.endswith("adaLN_modulation_1")
        if swapped:  # the checkpoint holds (shift, scale), diffusers (scale, shift)
            stacked = torch.cat(stacked.chunk(2)[::-1])
        parts = _fused_parts(kind, stacked.shape[0], stacked.shape[1], seed)
        tensors.update({f"{layer}.{k}": v for k, v in parts.items()})
        patched = _by_hand(kind, parts, stacked)
        if swapped:
            patched = torch.cat(patched.chunk(2)[::-1])
        for module, rows in zip(modules, patched.split([m.weight.shape[0] for m in modules]), strict=True):
            want[id(module)] = rows
    path = tmp_path / f"fused-{kind}.safetensors"
    save_file(tensors, path)
    modules = [m for ms in fused_layers.values() for m in ms]

    apply_loras(flux_pipe, [(path, 1.0)])
    image = _img(flux_pipe)
    for m in modules:
        torch.testing.assert_close(m.weight.detach(), want[id(m)], rtol=1e-5, atol=1e-5)
    assert max((want[id(m)] - base[id(m)]).abs().max().item() for m in modules) > 1e-2
    apply_loras(flux_pipe, [(path, 0.5)])  # recomputed from the original weights
    for m in modules:
        half = base[id(m)] + 0.5 * (want[id(m)] - base[id(m)])
        torch.testing.assert_close(m.weight.detach(), half, rtol=1e-5, atol=1e-5)
    apply_loras(flux_pipe, [])
    for m in modules:
        assert torch.equal(m.weight, base[id(m)])
    with torch.no_grad():  # the same change merged by hand
        for m in modules:
            m.weight.copy_(want[id(m)])
        try:
            by_hand = _img(flux_pipe)
        finally:
            for m in modules:
                m.weight.copy_(base[id(m)])
    assert np.abs(image - by_hand).max() <= 1
    assert np.abs(image - _img(flux_pipe)).max() > 2  # the file visibly changes the image


def test_a_lokr_of_flux2s_fused_qkv_merges_into_its_parts(tiny_model, tmp_path):
    """FLUX.2's dual blocks fuse q, k, v in the checkpoint (not in diffusers): a LoKr of
    `img_attn_qkv` is merged into to_q / to_k / to_v as the hand-made fused change, half at 0.5."""
    pipe = load_pipeline(str(tiny_model("flux2")), "flux2", device="cpu")
    attn = pipe.transformer.transformer_blocks[0].attn
    modules = [attn.to_q, attn.to_k, attn.to_v]
    base = [m.weight.detach().clone() for m in modules]
    stacked = torch.cat(base)  # [3 * hidden, hidden]
    parts = _fused_parts("lokr", stacked.shape[0], stacked.shape[1], seed=4)
    want = _by_hand("lokr", parts, stacked).split([w.shape[0] for w in base])
    path = tmp_path / "flux2-lokr.safetensors"
    save_file({f"lora_unet_double_blocks_0_img_attn_qkv.{k}": v for k, v in parts.items()}, path)
    for strength in (1.0, 0.5):
        apply_loras(pipe, [(path, strength)])
        for m, b, w in zip(modules, base, want, strict=True):
            torch.testing.assert_close(m.weight.detach(), b + strength * (w - b), rtol=1e-5, atol=1e-5)
    apply_loras(pipe, [])
    assert all(torch.equal(m.weight, b) for m, b in zip(modules, base, strict=True))
