"""An SDXL kohya LoRA whose CLIP layers (`lora_te1_` / `lora_te2_` with lora_down / lora_up /
.alpha) are q / k / v projections only, with or without a U-Net part, is applied by generation,
each layer at its alpha / rank, the same as the diffusers-named file of that change. Before
(RELIABILITY 896): refused with diffusers' "Could not automatically infer state dict type" (its
SDXL loader tells a kohya text-encoder part's format by the names only out_proj / mlp layers get)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from tests.unit.lora.te_files import sdxl_files

from lorastudio.generate import apply_loras
from lorastudio.tiny import build_tiny_pipeline


def _weights(pipe) -> dict[str, torch.Tensor]:
    """{component.module: effective weight [out, in]} of every Linear of both CLIP encoders now."""
    out = {}
    with torch.no_grad():
        for component in ("text_encoder", "text_encoder_2"):
            model = getattr(pipe, component)
            for name, module in model.named_modules():
                base = getattr(module, "base_layer", module)
                if (
                    isinstance(base, torch.nn.Linear)
                    and "lora_" not in name
                    and not name.endswith("base_layer")
                ):
                    eye = torch.eye(base.in_features)
                    out[f"{component}.{name}"] = (module(eye) - module(torch.zeros(1, base.in_features))).T
    return out


@pytest.mark.parametrize("with_unet", [False, True])
def test_an_sdxl_file_of_attention_only_clip_layers_generates_at_its_alphas(with_unet, tmp_path):
    pipe = build_tiny_pipeline("sdxl")
    theirs, ours = sdxl_files(pipe)  # kohya names (alpha 2 x rank), the same change in diffusers' names
    encoders = {"theirs": theirs, "ours": ours}
    for label, tensors in encoders.items():
        kept = {
            k: v
            for k, v in tensors.items()
            if (k.startswith(("lora_te", "text_encoder")) and ("q_proj" in k or "v_proj" in k))
            or (with_unet and k.startswith(("lora_unet_", "unet.")))
        }
        save_file(kept, str(tmp_path / f"{label}.safetensors"))
    base = _weights(pipe)
    got = {}
    for label in encoders:
        apply_loras(pipe, [(tmp_path / f"{label}.safetensors", 0.5)])
        got[label] = _weights(pipe)
    apply_loras(pipe, [])
    changed = [n for n in base if not torch.allclose(got["ours"][n], base[n])]
    assert any(n.startswith("text_encoder.") for n in changed) and any(
        n.startswith("text_encoder_2.") for n in changed
    )
    for name in base:
        torch.testing.assert_close(got["theirs"][name], got["ours"][name], rtol=1e-4, atol=1e-5, msg=name)
