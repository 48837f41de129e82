"""FLUX.2 weights in the names ComfyUI's model holds (BFL's original names), for
bench/comfyui_check.py: ComfyUI has no diffusers FLUX.2 conversion, so the harness gives it the
base and the expected change already converted by lorastudio's names_flux2 tables."""

from __future__ import annotations

import torch

from lorastudio.errors import ConfigError
from lorastudio.lora import names_flux2


def flux2_native(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """FLUX.2 weights in BFL names (lorastudio's names_flux2: ComfyUI has no diffusers FLUX.2
    conversion), fused q/k/v parts stacked in row order, the final adaLN's halves swapped (as
    diffusers' convert_flux2_transformer_checkpoint_to_diffusers swaps them); the q / k norms'
    weights too."""
    parts: dict[str, dict[int, torch.Tensor]] = {}
    norms = {  # the q / k RMSNorms ComfyUI's QKNorm holds as comfy.ops layers (`.weight`)
        f"{blocks}.{i}.{d}": f"{bfl}.{i}.{o}"
        for blocks, bfl, table in (
            ("transformer_blocks", "double_blocks", names_flux2.QK_NORMS_DOUBLE),
            ("single_transformer_blocks", "single_blocks", names_flux2.QK_NORMS_SINGLE),
        )
        for i in range(64)
        for d, o in table.items()
    }
    for key, value in weights.items():
        if not key.endswith(".weight"):
            continue
        module = key.removesuffix(".weight")
        try:
            bfl, part = (norms[module], None) if module in norms else names_flux2.to_original(module)
        except ConfigError:  # a module with no BFL name is not one a LoRA patches
            continue
        parts.setdefault(bfl + ".weight", {})[0 if part is None else part] = value
    out = {k: torch.cat([p[i] for i in sorted(p)], dim=0) for k, p in parts.items()}
    swapped = f"{names_flux2.SWAPPED}.weight"  # BFL's (shift, scale) rows, diffusers' (scale, shift)
    if swapped in out:
        out[swapped] = torch.cat(out[swapped].chunk(2)[::-1])
    return out
