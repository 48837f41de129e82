"""A diffusers-layout DoRA (`lora_magnitude_vector`) at generation's strength, as ComfyUI applies
a DoRA: the weight moves the given fraction of the way from the base weight to the full DoRA
weight,

    W <- W + s * (W_dora - W),   W_dora = m * (W + delta) / ||W + delta||   (norm per output row)

peft applies an adapter weight s to a DoRA by scaling its LoRA part before the normalisation,
m * (W + s * delta) / ||W + s * delta||, which is not the fraction s of the change (25 % off at
0.5 in a tiny FLUX.1 run), and peft's DoRA layer has no other strength: the magnitude is a
vector per output row while the change's direction depends on s, so no (magnitude, scale) pair
reproduces the interpolation. So generation takes peft's reading of the file (names, alpha and
rank patterns, the magnitudes: what `load_lora_weights` loaded), computes W_dora from the
layer's own tensors at strength 1 (peft's merge rule: delta = its `get_delta_weight`, the norm
of W + delta per output row, as its DoRA layers' `get_weight_norm`), writes the interpolated
weight into the layer and deletes the adapter.

Contract: `merge_dora_adapter(pipe, adapter, strength)` does so for every layer of `pipe` that
holds `adapter` as a DoRA and answers True (then the adapter is gone from the pipeline); False,
touching nothing, for an adapter that is no DoRA. Each weight it changes is kept first
(lycoris_patch.keep_original), so the next apply_loras restores it exactly and a new strength is
computed from the original weights. At strength 1 the weight is peft's own merge of the DoRA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lorastudio.generate.lycoris_patch import keep_original

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

__all__ = ["merge_dora_adapter"]


def _dora_layers(pipe: DiffusionPipeline, adapter: str) -> list[torch.nn.Module]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = []
    for module in pipe.components.values():
        if not isinstance(module, torch.nn.Module):
            continue
        for layer in module.modules():
            if isinstance(layer, BaseTunerLayer) and getattr(layer, "use_dora", {}).get(adapter):
                layers.append(layer)
    return layers


def merge_dora_adapter(pipe: DiffusionPipeline, adapter: str, strength: float) -> bool:
    """Merge DoRA adapter `adapter` into its layers at `strength` by the interpolation rule
    and delete it (module docstring). False when `adapter` is no DoRA."""
    layers = _dora_layers(pipe, adapter)
    if not layers:
        return False
    with torch.no_grad():
        for layer in layers:
            weight = layer.get_base_layer().weight  # [out, in] or [out, in, kh, kw]
            if getattr(layer, "fan_in_fan_out", False):
                raise ValueError(
                    f"a DoRA on a fan-in-fan-out layer ({type(layer).__name__}) is not supported"
                )
            base = weight.detach().float()
            flat = base.reshape(base.shape[0], -1)  # [out, in...]
            delta = layer.get_delta_weight(adapter).float().reshape(flat.shape)  # scaling * B @ A
            magnitude = layer.lora_magnitude_vector[adapter].weight.float().reshape(-1, 1)  # [out, 1]
            full = magnitude * (flat + delta) / (flat + delta).norm(dim=1, keepdim=True)  # W_dora
            keep_original(pipe, weight)
            weight.copy_((flat + strength * (full - flat)).reshape(base.shape).to(weight.dtype))
    pipe.delete_adapters(adapter)
    return True
