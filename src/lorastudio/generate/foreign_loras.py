"""LoRA files the pipeline's own `load_lora_weights` cannot read but lorastudio's readers do:
OneTrainer's Qwen-Image and Z-Image files (`lora_transformer_<diffusers name, "_" for ".">` with
lora_down / lora_up / .alpha: diffusers' Qwen-Image and Z-Image loaders take them for unknown
modules). FLUX.1's are left to diffusers, whose FluxPipeline reads them itself.

Contract: `readable_state(path, pipe)` answers None for a file the pipeline's loader reads as it
is, else the file's LoRA as a diffusers state dict (`transformer.<module>.lora_A / lora_B`, each
layer's alpha / rank folded into its lora_B), read by lorastudio/lora's kohya reader (the one
`lora convert` uses; every name resolved against the family's real module names,
lora/onetrainer_names.py): `load_lora_weights(state_dict)` with no adapter config then applies
scale 1 in every layer, i.e. the file's own weight change, and set_adapters' strength scales it
as for any other file. Raises ModelSourceError naming the file and the layer it cannot read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lorastudio.errors import ConfigError, ModelSourceError

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

_ONETRAINER = "lora_transformer_"


def readable_state(path: Path, pipe: DiffusionPipeline) -> dict[str, torch.Tensor] | None:
    """The diffusers state dict to load in place of `path`, or None (module docstring)."""
    from safetensors import SafetensorError, safe_open

    from lorastudio.generate.lycoris_names import layout_of_pipeline
    from lorastudio.lora import onetrainer_names
    from lorastudio.lora.convert import fold_strength
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.files import denoiser_prefix, peft_from_file

    layout = layout_of_pipeline(type(pipe).__name__)
    if layout not in onetrainer_names.FAMILIES:
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            theirs = any(k.startswith(_ONETRAINER) for k in f.keys())  # noqa: SIM118
    except (OSError, SafetensorError):
        return None  # the loader names the problem
    if not theirs:
        return None
    tensors, metadata = read_lora_file(path)
    try:
        lora = fold_strength(peft_from_file(tensors, metadata, layout))
    except (ConfigError, ModelSourceError) as err:
        raise ModelSourceError(f"cannot apply LoRA {path}: {err}") from err
    prefix = denoiser_prefix(layout)
    return {f"{prefix}.{k}": v for k, v in lora.tensors.items()}
