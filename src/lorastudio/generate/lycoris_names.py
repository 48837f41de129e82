"""LyCORIS files under kohya's names, for generation's ComfyUI-rule merge (generate/lycoris_patch.py).

kohya sd-scripts (its LyCORIS networks), the LyCORIS library and ai-toolkit write DoRA
(`.dora_scale`), LoHa (`.hada_*`) and LoKr (`.lokr_*`) layers under the family's kohya names,
`lora_unet_<checkpoint name, "_" for ".">` or ComfyUI's generic `diffusion_model.<checkpoint
name>`, which ComfyUI reads; generation merges layers keyed `lycoris_<diffusers name>`
(lora/lycoris.py). `to_lycoris_names(modules, pipeline_class)` renames each such layer to that key
through the family's name tables (lora/names.py, lora/convert_read.py), so the same
merge applies to it. ai-toolkit's LoKr of a diffusers-model family (its default "peft format":
FLUX.1, FLUX.1 Kontext) is `transformer.<diffusers name>.lokr_w1 ...`, a spelling ComfyUI maps for
every transformer family (`model_lora_keys_unet`'s "transformer." + diffusers name,
tests/data/comfyui_key_map.json.gz): read as that diffusers module (RELIABILITY 2240).

Contract: a layer already named `lycoris_…` is kept; a layer whose checkpoint name is one fused
linear of several diffusers layers (FLUX.1's `img_attn.qkv`, `txt_attn.qkv`, `linear1`; FLUX.2's
q, k, v) goes to all its parts, in the fused weight's row order, and the final adaLN (stored with
its two halves in the other order) to its one layer marked `swapped` (Z-Image's fused
`attention.qkv` under ComfyUI's own names, names.z_image_from_comfy, likewise): patch_lycoris computes the
patched fused weight once, as ComfyUI does on its fused checkpoint, and splits it by rows into
the parts. A name of no layer is left under its own name (patch_lycoris names it); one layer
named twice is refused (ModelSourceError).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.lora import names
from lorastudio.lora.lycoris import PREFIX, module_key

__all__ = ["Target", "layout_of_pipeline", "to_lycoris_names"]

_KOHYA, _GENERIC = "lora_unet_", "diffusion_model."
_DIFFUSERS = "transformer."  # diffusers' own module names (ai-toolkit's peft-format LoKr; not SDXL's U-Net)


class _NoName(Exception):
    """A layer key of no kohya name of the layout (left for patch_lycoris to name)."""


def layout_of_pipeline(pipeline_class: str) -> str | None:
    """The kohya layout (lora.names.kohya_layout) of the family whose pipeline class this is."""
    from lorastudio import families

    for family in families.names():
        spec = families.get(family).spec
        if pipeline_class == spec.pipeline_class or pipeline_class in spec.accepted_pipelines:
            return names.kohya_layout(family)
    return None


@dataclass(frozen=True)
class Target:
    """The denoiser layers one LyCORIS layer patches: their `lycoris_` keys in the row order of
    the checkpoint's weight (several: a fused linear of the checkpoint, split in diffusers), and
    whether that weight holds its two row halves in the other order (FLUX's final adaLN)."""

    keys: tuple[str, ...]
    swapped: bool = False


def _diffusers_names(layer: str, layout: str) -> tuple[list[str], bool]:
    """(the diffusers modules of one kohya-named layer in the checkpoint weight's row order,
    whether its halves are swapped). Raises _NoName / ConfigError (no such layer)."""
    from lorastudio.lora.convert import _BFL

    if layer.startswith(_DIFFUSERS) and layout != "sdxl":  # already a diffusers module's name
        return [layer.removeprefix(_DIFFUSERS)], False
    if layer.startswith(_GENERIC):
        native = layer.removeprefix(_GENERIC)
    elif layer.startswith(_KOHYA) and layout not in names.PEFT_SUFFIXED:
        native = names.undot(layer.removeprefix(_KOHYA), layout)
    else:
        raise _NoName(layer)
    if layout == "z-image":  # ComfyUI's own names (its trainer node's files) or diffusers'
        return names.z_image_from_comfy(native), False
    if layout not in _BFL:
        return [names.from_original(native, layout)], False
    return _BFL[layout][1](native), native == names.FLUX_SWAPPED


def to_lycoris_names(
    modules: Mapping[str, dict[str, Any]], pipeline_class: str
) -> dict[str, tuple[Target, dict[str, Any]]]:
    """{layer key: (the layers it patches, its parts)} of a LyCORIS file
    (lora.lycoris.group_modules), every kohya-named layer resolved to its diffusers modules'
    `lycoris_` keys (module docstring). Raises ModelSourceError for a layer named twice."""
    layout = layout_of_pipeline(pipeline_class)
    out: dict[str, tuple[Target, dict[str, Any]]] = {}
    taken: dict[str, str] = {}  # lycoris_ key -> the file's layer that patches it
    for layer, parts in modules.items():
        if layer.startswith(PREFIX) or layout is None:
            target = Target((layer,))
        else:
            try:
                found, swapped = _diffusers_names(layer, layout)
                target = Target(tuple(module_key(m) for m in found), swapped)
            except (ConfigError, _NoName):  # left under its own name: patch_lycoris names it
                target = Target((layer,))
        for key in target.keys:
            if key in taken:
                raise ModelSourceError(
                    f"{layer} names a layer the file holds twice ({key}, also {taken[key]})"
                )
            taken[key] = layer
        out[layer] = (target, parts)
    return out
