"""The denoiser keys of a diffusers-named LoRA file (`transformer.<module>...` / `unet.<module>...`)
that the pipeline's `load_lora_weights` reads, and ai-toolkit's DoRA magnitudes among them.

diffusers hands such keys to peft as they are: peft takes a layer's `lora_A` / `lora_B` (B's
bias too), a DoRA's `lora_magnitude_vector`, and diffusers the older `lora.down` / `lora.up` and
a per-layer `.alpha`; any other tensor is dropped with no more than a logged "unexpected keys"
(generate/lora_coverage.py counts layers, not tensors), so the file renders without it.
ai-toolkit's DoRA (toolkit/models/DoRA.py, saved in its "peft format" by
network_mixins.get_state_dict: `transformer.<diffusers module>.lora_A.weight / lora_B.weight /
magnitude`, no alpha, its scale alpha / rank 1) holds each layer's magnitude as `.magnitude`:
that is peft's `lora_magnitude_vector` ([out], the same rule: m (W + B A) / ||W + B A|| per
output row), so before, such a FLUX.1 file rendered as its plain LoRA, silently (RELIABILITY
2241). ComfyUI reads no `.magnitude` either (it logs "lora key not loaded").

Contract: `unread_keys(keys)` answers the diffusers-named denoiser keys no reader takes, ai-toolkit's
magnitudes aside; `aitoolkit_magnitudes(keys)` those magnitudes (a `.magnitude` beside its
layer's lora_A); `peft_state(path)` the file's tensors with each of them renamed to peft's name
(per-layer alphas folded into lora_B: lora/file_read.read_lora_file), for load_lora_weights.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import torch

__all__ = ["aitoolkit_magnitudes", "peft_state", "unread_keys"]

_DENOISER = ("transformer.", "unet.")
# what diffusers' loaders and peft read of a diffusers-named layer: every tensor of theirs has
# "lora" in its name (peft's lora_A / lora_B / lora_magnitude_vector, diffusers' older
# lora.down / to_q_lora.up / lora_linear_layer ...), or is a per-layer `.alpha`, or a q / k norm's
# weight of a FLUX Control LoRA (FluxLoraLoaderMixin's _control_lora_supported_norm_keys); no
# diffusers module name holds "lora"
_READ = re.compile(r"lora|\.alpha$|\.norm_(q|k|added_q|added_k)\.")
_MAGNITUDE, _PEFT_MAGNITUDE, _A = ".magnitude", ".lora_magnitude_vector", ".lora_A.weight"


def aitoolkit_magnitudes(keys: Iterable[str]) -> list[str]:
    """The keys of `keys` that are ai-toolkit's DoRA magnitudes (`<denoiser prefix><module>.magnitude`
    beside `<...module>.lora_A.weight`)."""
    names = set(keys)
    return sorted(
        k
        for k in names
        if k.startswith(_DENOISER) and k.endswith(_MAGNITUDE) and k.removesuffix(_MAGNITUDE) + _A in names
    )


def unread_keys(keys: Iterable[str]) -> list[str]:
    """The diffusers-named denoiser keys of `keys` that neither diffusers' loader nor peft reads
    (module docstring), ai-toolkit's magnitudes not counted."""
    names = list(keys)
    theirs = set(aitoolkit_magnitudes(names))
    return sorted(k for k in names if k.startswith(_DENOISER) and not _READ.search(k) and k not in theirs)


def peft_state(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of the file `path` with ai-toolkit's `.magnitude` keys renamed to peft's
    `.lora_magnitude_vector` ([out] each, as peft holds a linear layer's). Raises NotFound,
    ModelSourceError (lora/file_read.read_lora_file)."""
    from lorastudio.lora.file_read import read_lora_file

    tensors, _ = read_lora_file(path)
    renamed = set(aitoolkit_magnitudes(tensors))
    return {
        (k.removesuffix(_MAGNITUDE) + _PEFT_MAGNITUDE if k in renamed else k): v for k, v in tensors.items()
    }
