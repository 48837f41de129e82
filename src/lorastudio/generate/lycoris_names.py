"""LyCORIS files under kohya's names, for generation's ComfyUI-rule merge (generate/lycoris_patch.py).

kohya sd-scripts (its LyCORIS networks), the LyCORIS library and ai-toolkit write DoRA
(`.dora_scale`), LoHa (`.hada_*`) and LoKr (`.lokr_*`) layers under the family's kohya names,
`lora_unet_<checkpoint name, "_" for ".">` or ComfyUI's generic `diffusion_model.<checkpoint
name>`, which ComfyUI reads; generation merges layers keyed `lycoris_<diffusers name>`
(lora/lycoris.py). `to_lycoris_names(modules, pipeline_class)` renames each such layer to that key
through the family's name tables (lora/names.py, the readers of lora/convert.py), so the same
merge applies to it.

Contract: a layer already named `lycoris_…` is kept; a layer whose checkpoint name is one fused
linear of several diffusers layers (FLUX.1 / FLUX.2's q, k, v; the final adaLN, stored in the
other half order) is refused (a LyCORIS factorisation of the fused weight does not split into the
parts' factors), as is a name of no layer: ModelSourceError naming them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.lora import names
from lorastudio.lora.lycoris import PREFIX, module_key

__all__ = ["layout_of_pipeline", "to_lycoris_names"]

_KOHYA, _GENERIC = "lora_unet_", "diffusion_model."


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


def _diffusers_name(layer: str, layout: str) -> str:
    """The diffusers module of one kohya-named layer. Raises _NoName / ConfigError (no such
    layer) or ModelSourceError (a fused layer)."""
    from lorastudio.lora.convert import _BFL

    if layer.startswith(_GENERIC):
        native = layer.removeprefix(_GENERIC)
    elif layer.startswith(_KOHYA) and layout not in names.PEFT_SUFFIXED:
        native = names.undot(layer.removeprefix(_KOHYA), layout)
    else:
        raise _NoName(layer)
    if layout not in _BFL:
        return names.from_original(native, layout)
    modules = _BFL[layout][1](native)
    if len(modules) != 1 or native == names.FLUX_SWAPPED:
        raise ModelSourceError(f"{layer} is one fused layer of {', '.join(modules)}")
    return modules[0]


def to_lycoris_names(modules: Mapping[str, dict[str, Any]], pipeline_class: str) -> dict[str, dict[str, Any]]:
    """{layer key: parts} of a LyCORIS file (lora.lycoris.group_modules) with every kohya-named
    layer keyed by its diffusers module's `lycoris_` key. Raises ModelSourceError naming the layers
    that have none (module docstring)."""
    layout = layout_of_pipeline(pipeline_class)
    out: dict[str, dict[str, Any]] = {}
    fused, unknown = [], []
    for layer, parts in modules.items():
        if layer.startswith(PREFIX) or layout is None:
            out[layer] = parts
            continue
        try:
            key = module_key(_diffusers_name(layer, layout))
        except ModelSourceError as err:
            fused.append(str(err))
            continue
        except (ConfigError, _NoName):
            unknown.append(layer)
            continue
        if key in out:
            raise ModelSourceError(f"{layer} names a layer the file holds twice ({key})")
        out[key] = parts
    if fused:
        raise ModelSourceError(
            "generation cannot merge a LyCORIS factorisation of a fused layer into its parts: "
            + "; ".join(fused[:3])
            + (f" and {len(fused) - 3} more" if len(fused) > 3 else "")
        )
    for layer in unknown:  # left under their own names: patch_lycoris names them as not layers
        out[layer] = modules[layer]
    return out
