"""The messages generation gives for a LoRA file diffusers' loader fails on or loads nothing of.

diffusers' converters and peft raise with messages sized by the file: peft's "Target modules
{<every module of the file>} not found", diffusers' "Incompatible keys detected: <every key>" or
"`state_dict` should be empty at this point but has state_dict.keys()=dict_keys([<every key>])"
run to tens of KB for a real 500-layer LoRA (an error the web UI, the API and the CLI showed
whole), and a KeyError's text is the missing key alone (`'model_type'`, a key name in quotes),
which says neither what failed nor why.

- `loader_failure(path, err)`: "cannot apply LoRA <path>: <reason>", the reason cut to
  `MAX_REASON` characters (its length stated) and a KeyError's named as a key the loader's
  reading of the file's layout looked for and did not find.
- `no_layer_message(pipe, path)`: the refusal of a file of which the loader put no layer on the
  pipeline, with one of its key names and the prefixes the pipeline's loader reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.errors import ModelSourceError, NotFound

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

MAX_REASON = 400  # characters of a loader's own message kept in ours


def _cut(text: str) -> str:
    return text if len(text) <= MAX_REASON else f"{text[:MAX_REASON]}... (cut: {len(text)} characters)"


def loader_failure(path: str | Path, err: BaseException) -> ModelSourceError:
    """The ModelSourceError for diffusers' loader failing on LoRA `path` with `err` (module
    docstring); `err` stays its cause."""
    if isinstance(err, KeyError) and len(err.args) == 1:
        key = _cut(repr(err.args[0]))
        reason = (
            f"diffusers' loader looked for {key} and did not find it (KeyError): its reading of this"
            " file's key names does not fit them (a layout it does not read, or keys it reads in part)"
        )
    else:
        reason = _cut(str(err)) or f"diffusers' loader failed ({type(err).__name__}) on its layers"
    return ModelSourceError(f"cannot apply LoRA {path}: {reason}")


def no_layer_message(pipe: DiffusionPipeline, path: str | Path) -> str:
    """Why LoRA `path` loaded nothing: one of its keys and the component prefixes `pipe`'s loader
    reads (`transformer.`, `unet.`, `text_encoder.` ...)."""
    from lorastudio.lora.header import read_header

    try:
        keys = sorted(read_header(Path(path)).tensors, key=lambda k: k.endswith(".alpha"))  # a matrix first
    except (ModelSourceError, NotFound):
        keys = []
    loadable = [f"{c}." for c in getattr(pipe, "_lora_loadable_modules", [])]
    shown = f" (its layers, such as {keys[0][:120]!r}," if keys else " (its layers"
    return (
        f"LoRA {path} has no layer matching this {type(pipe).__name__}{shown} name no module the"
        f" pipeline's loader puts a LoRA on: it reads {', '.join(loadable) or 'no'} names and kohya /"
        " ComfyUI names of this model); is it another model's LoRA, or of a layout it does not read?"
    )
