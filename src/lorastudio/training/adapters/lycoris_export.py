"""The LyCORIS file of a trained DoRA / LoHa / LoKr adapter (lora_format "kohya"): the tensors in
the layout ComfyUI reads (lora/lycoris.py), the header, and ComfyUI's key check for the sidecar.
Called by training/adapters/export.py `save_lora`; the model-side facts (per-module rank / alpha, DoRA's
base-weight norms) are read here, the conversion itself is pure. The layout went through ComfyUI's
own loader for the families of COMFYUI_LOADER_CHECKED (bench/comfyui_check.py, every adapter
kind): the key check names that run as "loader_checked"."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from lorastudio.lora.comfy import COMFYUI_LOADER_CHECKED, comfy_key_map, comfyui_loader
from lorastudio.lora.dora_rule import COMFYUI, RULE_KEY
from lorastudio.lora.lycoris import (
    KOHYA,
    check_lycoris_keys,
    generic_spelling,
    kohya_spelling,
    peft_to_lycoris,
)
from lorastudio.lora.metadata import PREFIX, kohya_metadata, modelspec_metadata
from lorastudio.training.adapters.lora import lora_state_dict, module_scales


def dora_scales(denoiser: Any, adapter: str = "default") -> dict[str, torch.Tensor]:
    """{module: [out, 1] ([out, 1, 1, 1] for a conv)} = m * ||W|| / ||W + delta|| per output row,
    for each DoRA layer (peft's magnitude m, base weight W, delta = B @ A x scaling, a conv's
    kernel flattened into its row as peft's DoRA does): the dora_scale under which ComfyUI's
    output-axis DoRA gives peft's weight (lora/lycoris.py docstring)."""
    out = {}
    with torch.no_grad():
        for name, module in denoiser.named_modules():
            magnitude = getattr(module, "lora_magnitude_vector", None)
            if magnitude is None or adapter not in magnitude:
                continue
            base = module.get_base_layer().weight.detach().float()  # [out, in] or [out, in, k, k]
            rows = base.shape[0]
            rank = module.lora_A[adapter].weight.shape[0]
            weight = base.reshape(rows, -1)  # [out, in (x k x k)]
            a = module.lora_A[adapter].weight.float().reshape(rank, -1)  # [r, in (x k x k)]
            b = module.lora_B[adapter].weight.float().reshape(rows, rank)  # [out, r] (a conv's B is 1x1)
            merged = weight + (b @ a) * module.scaling[adapter]  # [out, in (x k x k)]
            m = magnitude[adapter].weight.detach().float().reshape(rows)  # [out] (a conv's: [1, out, 1, 1])
            scale = m * weight.norm(dim=1) / merged.norm(dim=1)  # [out]
            out[name] = scale.reshape(rows, *[1] * (base.dim() - 1)).cpu()  # [out, 1 (, 1, 1)]
    return out


def lycoris_file(
    denoiser: Any,
    family: str,
    adapter: str,
    info: Mapping[str, str],
    module_shapes: Mapping[str, tuple[int, ...]],
) -> tuple[dict[str, torch.Tensor], dict[str, str], dict[str, Any]]:
    """(tensors, header, ComfyUI key check as JSON) of `denoiser`'s `adapter` ("dora", "loha" or
    "lokr") in the LyCORIS layout. `info`: the `lorastudio.*` header strings; `module_shapes`:
    {diffusers module: base weight shape} (export.base_weight_shapes)."""
    scales = module_scales(denoiser)
    extra = dora_scales(denoiser) if adapter == "dora" else None
    generic = generic_spelling(family, adapter)  # Z-Image LoKr: the spelling diffusers reads too
    kohya = kohya_spelling(family, adapter)  # SDXL LoHa / LoKr: kohya's names, which A1111 matches
    tensors = peft_to_lycoris(lora_state_dict(denoiser), adapter, scales, extra, generic=generic, kohya=kohya)
    key_map = comfy_key_map(family, module_shapes)
    check = check_lycoris_keys({k: tuple(v.shape) for k, v in tensors.items()}, key_map).to_json()
    if family in COMFYUI_LOADER_CHECKED:
        check["loader_checked"] = comfyui_loader(
            family, adapter
        )  # this layout went through ComfyUI's own loader
    ranks = sorted({r for r, _ in scales.values()})
    alphas = sorted({a for _, a in scales.values()})
    lycoris_info = {**info, PREFIX + "lora_format": "lycoris"}
    header = {
        "format": "pt",
        **info,
        **modelspec_metadata(lycoris_info),  # the SAI model spec's keys: architecture "<base>/lycoris"
        # kohya's ss_* keys as in every kohya-layout file (base model version, the run's facts) ...
        **kohya_metadata(info, ranks[-1] if ranks else 0, alphas[-1] if alphas else 0.0),
        PREFIX + "lora_format": "lycoris",
        PREFIX + "adapter": adapter,
        # ... with LyCORIS's own network module and arguments
        "ss_network_module": "lycoris.kohya",
        "ss_network_args": json.dumps(
            {"algo": "lora" if adapter == "dora" else adapter, "dora_wd": adapter == "dora"}
        ),
        "ss_network_dim": str(ranks[-1]) if ranks else "",
        "ss_network_alpha": f"{alphas[-1]:g}" if alphas else "",
    }
    if adapter == "dora":  # the rule its dora_scale follows, which kohya's LyCORIS keys do not tell
        header[RULE_KEY] = COMFYUI  # (lora/dora_rule.py: LyCORIS' own files hold the magnitude there)
    return tensors, header, check


def a1111_forge_verdict(tensors: Mapping[str, torch.Tensor], family: str, adapter: str) -> dict[str, Any]:
    """The sidecar's "a1111_forge" entry of a LyCORIS file. A1111's Lora extension matches only
    kohya names (`lora_unet_<SGM name>`: SDXL's LoHa / LoKr, lora/lycoris.py KOHYA_SPELLED), never
    a `lycoris_` layer; Forge reads every layer through ComfyUI's map and rules (the "comfyui"
    entry). Both loaders' own code ran on SDXL and FLUX.1 files of every kind (bench/webui_check.py,
    session 39: RELIABILITY 1980)."""
    if family != "sdxl":
        return {"checked": False, "reason": f"A1111 has no {family}; Forge reads it through ComfyUI's map"}
    unmatched = sorted({k.split(".")[0] for k in tensors if not k.startswith(KOHYA)})
    reason = None
    if unmatched:
        reason = (
            f"A1111 matches no lycoris_ layer ({len(unmatched)} here: "
            + ("DoRA keeps that spelling" if adapter == "dora" else "layers kohya's SGM names do not cover")
            + "); Forge loads them through ComfyUI's map"
        )
    return {
        "checked": True,
        "ok": reason is None,
        "rules": "A1111 matches kohya lora_unet_<SGM name> layers; Forge ComfyUI's map",
        **({"reason": reason, "unmatched": unmatched[:20]} if reason else {}),
    }
