"""An SDXL kohya LoRA whose layers differ in `.alpha` (kohya's `resize_lora.py --dynamic_method`,
block-weighted merges) is applied with each layer's own alpha / rank, as ComfyUI applies it.

Before (RELIABILITY 895): generation handed it to diffusers' SDXL loader, which gives every layer
the most common alpha (utils/peft_utils.get_peft_kwargs: its alpha_pattern matches no module), so
every layer of another alpha rendered at the wrong strength (a third or half of it here), without a
word. The reference is the same change with each layer's alpha / rank folded into its lora_up and
one alpha (= rank) for all, which diffusers applies right."""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file

from lorastudio.generate import apply_loras
from lorastudio.lora.files import convert_file
from lorastudio.tiny import build_tiny_pipeline

RANK = 4


def _linears(pipe) -> dict[str, torch.nn.Linear]:
    return {n: m for n, m in pipe.unet.named_modules() if isinstance(m, torch.nn.Linear) and "attn" in n}


def _weights(pipe, names) -> dict[str, torch.Tensor]:
    """Each module's effective weight [out, in] as the pipeline applies it now (LoRA included)."""
    out = {}
    with torch.no_grad():
        for name in names:
            module = pipe.unet.get_submodule(name)
            width = getattr(module, "base_layer", module).in_features
            out[name] = (module(torch.eye(width)) - module(torch.zeros(1, width))).T
    return out


def test_an_sdxl_kohya_file_of_per_layer_alphas_applies_each_layer_at_its_alpha(tmp_path):
    pipe = build_tiny_pipeline("sdxl")
    g = torch.Generator().manual_seed(0)
    peft = {}
    for name, module in _linears(pipe).items():
        peft[f"unet.{name}.lora_A.weight"] = torch.randn(RANK, module.in_features, generator=g) * 0.3
        peft[f"unet.{name}.lora_B.weight"] = torch.randn(module.out_features, RANK, generator=g) * 0.3
    save_file(peft, str(tmp_path / "peft.safetensors"))
    convert_file(tmp_path / "peft.safetensors", tmp_path / "kohya.safetensors", "kohya", "sdxl")
    kohya = load_file(str(tmp_path / "kohya.safetensors"))  # SGM names, lora_down / lora_up / alpha
    theirs, folded = dict(kohya), dict(kohya)
    for i, key in enumerate(sorted(k for k in kohya if k.endswith(".alpha"))):
        alpha = float(1 + i % 3)  # 1, 2, 3: the most common one is 1
        layer = key.removesuffix(".alpha")
        theirs[key] = torch.tensor(alpha)
        folded[key] = torch.tensor(float(RANK))
        folded[f"{layer}.lora_up.weight"] = kohya[f"{layer}.lora_up.weight"] * alpha / RANK
    save_file(theirs, str(tmp_path / "theirs.safetensors"))
    save_file(folded, str(tmp_path / "folded.safetensors"))

    names = list(_linears(pipe))
    base = _weights(pipe, names)
    apply_loras(pipe, [(tmp_path / "folded.safetensors", 0.8)])
    want = _weights(pipe, names)
    apply_loras(pipe, [(tmp_path / "theirs.safetensors", 0.8)])
    got = _weights(pipe, names)
    for name in names:
        assert not torch.allclose(want[name], base[name]), name
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5, msg=name)
    apply_loras(pipe, [])
    for name, weight in _weights(pipe, names).items():
        torch.testing.assert_close(weight, base[name], rtol=0, atol=1e-6)
