"""Did the pipeline's `load_lora_weights` put every layer of a LoRA file on a module?

diffusers' loader converts a file (kohya, ai-toolkit, ComfyUI ... names) to its own names, then
gives each pipeline component the keys under its prefix (`transformer.`, `unet.`,
`text_encoder.` ...): keys of a module the component lacks are only logged ("unexpected keys"),
and keys of a component the pipeline puts no LoRA on (FLUX.1's T5, Qwen-Image's text encoder) are
dropped without a word. The image would then be rendered with part of the LoRA.

`layers_not_loaded(pipe, path, adapter)` answers, after `load_lora_weights(path,
adapter_name=adapter)`, the file's layers (diffusers' converted names: `<component>.<module>`)
that carry no adapter `adapter` (empty when every one does) and how many layers the file has. The file's layers are those of the
pipeline's own `lora_state_dict` (the conversion the load ran), so every layout the loader reads
is counted as it loads it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

__all__ = ["layers_not_loaded"]

# a layer's down matrix in diffusers' converted names: peft's lora_A, the older lora.down,
# kohya's lora_down (with an adapter name in between, as peft saves it)
_DOWN = re.compile(r"^(?P<module>.+)\.(lora_A|lora\.down|lora_down)(\.[A-Za-z0-9_]+)?\.weight$")


def _file_layers(pipe: DiffusionPipeline, path: Path) -> set[str]:
    """`<component>.<module>` of every layer of `path` as the pipeline's loader converts it."""
    kwargs: dict[str, Any] = {"return_lora_metadata": True}
    unet = getattr(pipe, "unet", None)
    if unet is not None:  # the SDXL loader maps kohya's SGM block numbers by the U-Net's config
        kwargs["unet_config"] = unet.config
    converted = type(pipe).lora_state_dict(str(path), **kwargs)
    state = converted[0] if isinstance(converted, tuple) else converted
    return {m.group("module") for key in state if (m := _DOWN.match(key))}


def _loaded_layers(pipe: DiffusionPipeline, adapter: str) -> set[str]:
    """`<component>.<module>` of every module of the pipeline that holds adapter `adapter`."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    loaded = set()
    for component, module in pipe.components.items():
        if not isinstance(module, torch.nn.Module):
            continue
        for name, layer in module.named_modules():
            if isinstance(layer, BaseTunerLayer) and adapter in getattr(layer, "lora_A", {}):
                loaded.add(f"{component}.{name}")
    return loaded


def layers_not_loaded(pipe: DiffusionPipeline, path: Path, adapter: str) -> tuple[list[str], int]:
    """(the layers of the LoRA file `path` that `load_lora_weights(path, adapter_name=adapter)`
    put on no module of `pipe`, sorted; the file's number of layers). The list is empty when
    each layer is loaded. Counted first: a file whose layers all loaded is never reported, even
    where the conversion spells a name otherwise than the module (then the list names the count)."""
    wanted = _file_layers(pipe, path)
    loaded = _loaded_layers(pipe, adapter)
    if len(loaded) >= len(wanted):
        return [], len(wanted)
    missing = sorted(wanted - loaded) or [f"{len(wanted) - len(loaded)} unnamed layers"]
    return missing, len(wanted)
