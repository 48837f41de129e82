"""Did the pipeline's `load_lora_weights` put every layer of a LoRA file on a module?

diffusers' loader converts a file (kohya, ai-toolkit, ComfyUI ... names) to its own names, then
gives each pipeline component the keys under its prefix (`transformer.`, `unet.`,
`text_encoder.` ...): keys of a module the component lacks are only logged ("unexpected keys"),
and keys of a component the pipeline puts no LoRA on (FLUX.1's T5, Qwen-Image's text encoder) are
dropped without a word. The image would then be rendered with part of the LoRA. (Those two are
handled before the load: generate/foreign_loras.py merges FLUX.1's and Chroma's T5 layers and refuses a
family's text-encoder layers it takes none of.)

    with converted_layers(pipe) as layers:
        pipe.load_lora_weights(path, adapter_name=adapter)
    missing, total = layers_not_loaded(pipe, layers, adapter)

`converted_layers(pipe)` records, while the load runs, the file's layers (diffusers' converted
names: `<component>.<module>`) from the state dict of the pipeline's own `lora_state_dict` call
inside `load_lora_weights` (the one read and conversion the load ran): every layout the loader
reads is counted as it loads it, and the check reads no file (no second read and copy of a LoRA
that can be 1+ GB). `layers_not_loaded(pipe, layers, adapter)` answers the layers that carry no
adapter `adapter` (empty when every one does) and how many layers the file has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ModelSourceError

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

__all__ = ["converted_layers", "layers_not_loaded"]

# a layer's down matrix in diffusers' converted names: peft's lora_A, the older lora.down,
# kohya's lora_down (with an adapter name in between, as peft saves it)
_DOWN = re.compile(r"^(?P<module>.+)\.(lora_A|lora\.down|lora_down)(\.[A-Za-z0-9_]+)?\.weight$")


class ConvertedLayers:
    """The layers of the state dicts the pipeline's `lora_state_dict` returned while recorded
    (`calls`: how many it returned; the check needs exactly one)."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.calls = 0

    def add(self, state: dict[str, Any]) -> None:
        self.calls += 1
        self.modules |= {m.group("module") for key in state if (m := _DOWN.match(key))}


@contextmanager
def converted_layers(pipe: DiffusionPipeline) -> Iterator[ConvertedLayers]:
    """Record the key names of what `pipe.lora_state_dict` returns inside the block (each
    pipeline's `load_lora_weights` gets its file's converted state dict from
    `self.lora_state_dict`): an instance attribute wraps the class's method for the block only and
    hands its result on unchanged; only key names are kept."""
    seen = ConvertedLayers()
    original = type(pipe).lora_state_dict

    def recording(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        state = result[0] if isinstance(result, tuple) else result
        seen.add(state)
        return result

    pipe.lora_state_dict = recording  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del pipe.lora_state_dict


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


def layers_not_loaded(
    pipe: DiffusionPipeline, layers: ConvertedLayers, adapter: str
) -> tuple[list[str], int]:
    """(the layers `layers` recorded of the load `load_lora_weights(path, adapter_name=adapter)`
    that it put on no module of `pipe`, sorted; the file's number of layers). The list is empty
    when each layer is loaded. Counted first: a file whose layers all loaded is never reported,
    even where the conversion spells a name otherwise than the module (then the list names the
    count). Reads no file. Raises ModelSourceError when the load's conversion was not recorded
    exactly once (a diffusers whose loader no longer asks `self.lora_state_dict`): unchecked,
    a partly loaded file would pass."""
    if layers.calls != 1:
        raise ModelSourceError(
            f"cannot check which LoRA layers {type(pipe).__name__} loaded: its loader's conversion "
            f"was seen {layers.calls} times, not once (an unexpected diffusers version?)"
        )
    wanted = layers.modules
    loaded = _loaded_layers(pipe, adapter)
    if len(loaded) >= len(wanted):
        return [], len(wanted)
    missing = sorted(wanted - loaded) or [f"{len(wanted) - len(loaded)} unnamed layers"]
    return missing, len(wanted)
