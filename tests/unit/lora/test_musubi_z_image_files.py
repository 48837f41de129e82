"""Z-Image LoRA files under kohya's prefix with diffusers' module names (`lora_unet_layers_0_attention_to_q`
with lora_down / lora_up / .alpha: musubi-tuner's, which diffusers' Z-Image reader takes and
generation applied) are read by `lora convert` at alpha / rank. Before (RELIABILITY 894): convert, merge, resize and
assistant_lora refused them ("'lora_unet_..' is not a z-image kohya/ComfyUI key")."""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file

from lorastudio import families
from lorastudio.lora.files import convert_file
from lorastudio.tiny import build_tiny_pipeline

RANK, ALPHA = 4, 8.0


def test_a_musubi_z_image_file_converts_at_alpha_over_rank(tmp_path):
    pipe = build_tiny_pipeline("z-image")
    targets = families.get("z-image").spec.lora_targets
    g = torch.Generator().manual_seed(0)
    theirs, want = {}, {}
    for name, module in pipe.transformer.named_modules():
        if isinstance(module, torch.nn.Linear) and any(name.endswith("." + t) for t in targets):
            a = torch.randn(RANK, module.in_features, generator=g)
            b = torch.randn(module.out_features, RANK, generator=g)
            flat = "lora_unet_" + name.replace(".", "_")
            theirs |= {
                f"{flat}.lora_down.weight": a,
                f"{flat}.lora_up.weight": b,
                f"{flat}.alpha": torch.tensor(ALPHA),
            }
            want[name] = b @ a * ALPHA / RANK  # [out, in]
    assert any("_context_refiner_" in k for k in theirs) and any("_to_out_0." in k for k in theirs)
    src = tmp_path / "musubi.safetensors"
    save_file(theirs, str(src))
    out = tmp_path / "diffusers.safetensors"
    convert_file(src, out, "diffusers", "z-image")
    got = load_file(str(out))
    assert {k.removeprefix("transformer.").rsplit(".lora_", 1)[0] for k in got} == set(want)
    for name, delta in want.items():
        a, b = got[f"transformer.{name}.lora_A.weight"], got[f"transformer.{name}.lora_B.weight"]
        torch.testing.assert_close(b @ a, delta, rtol=1e-5, atol=1e-5, msg=name)
