"""Whether an init_lora layer's weight change is finite in float32 (RELIABILITY 1680).

A file's values each pass `check_finite` (fix 41) and still make a change past float32: lora_up
and lora_down of 1e20 each give up @ down = 1e40 per entry (x rank), so the adapted layer's output
is inf and the run meets the divergence guard, which blames the learning rate. The load checks
each layer's change before anything is copied (training/adapters/init_lora.py for plain LoRA / DoRA files
in the diffusers or kohya layout; training/adapters/init_lycoris.py for LoHa / LoKr, whose change it
builds anyway for its scale check, and LyCORIS-layout DoRA, whose magnitude it computes).

Cheap where it can be: the product up @ down of a plain LoRA layer is not built when a bound
shows it fits. Each entry (up @ down)[i, j] is the dot product of up's row i and down's column j,
so |entry| <= ||up[i, :]|| x ||down[:, j]|| (Cauchy-Schwarz); the norms are taken in float64 (a
float32 value's square and any sum of them fit there), O(size of the factors). Only where
max row norm x max column norm x |scale| reaches float32's largest value is the product built
(in float32, what the run's delta weight is) and checked entry by entry: a file of ordinary
values never builds it. Torch only; no library checks a LoRA's change for overflow.
"""

from __future__ import annotations

import torch

from lorastudio.errors import ModelSourceError

F32_MAX = float(torch.finfo(torch.float32).max)


def bound(up: torch.Tensor, down: torch.Tensor, scale: float) -> float:
    """An upper bound of |(up @ down)[i, j] x scale| over every entry, from the factors' row /
    column norms in float64 (module docstring). up [out, r, ...], down [r, in, ...]."""
    rows = up.reshape(up.shape[0], -1).double().norm(dim=1)  # [out]
    cols = down.reshape(down.shape[0], -1).double().norm(dim=0)  # [in (x k x k)]
    return float(rows.max()) * float(cols.max()) * abs(scale)


def lora_change_finite(up: torch.Tensor, down: torch.Tensor, scale: float) -> bool:
    """Whether up @ down x scale (a LoRA layer's change: up [out, r, 1, 1 or none], down
    [r, in, ...]) is finite in float32. Builds the product only when `bound` does not settle it."""
    if not (bool(torch.isfinite(up).all()) and bool(torch.isfinite(down).all())):
        return False
    if bound(up, down, scale) < F32_MAX:
        return True
    out, rank = up.shape[0], down.shape[0]
    delta = (up.reshape(out, rank).float() @ down.reshape(rank, -1).float()) * scale  # [out, in (x k x k)]
    return bool(torch.isfinite(delta).all())


def refusal(path: object, module: str, what: str) -> str:
    """The refusal of init_lora file `path`'s layer `module`, whose change `what` is not finite."""
    return (
        f"init_lora {path}: its layer {module}'s change ({what}) is past what float32 holds (inf or NaN) "
        "though each value is finite: the adapted layer's output would be inf and the run diverge; "
        "regenerate the file at a scale that fits float32"
    )


def check_lora_layers(
    path: object, modules: dict[str, tuple[torch.Tensor, torch.Tensor]], scale: float
) -> None:
    """Raise ModelSourceError (`refusal`) for the first layer, by name, of init_lora file `path`
    whose change is not finite in float32; `modules` is {module: (down, up)} as peft_modules
    reads a file, `scale` its alpha / rank. Asked before any layer is copied (RELIABILITY 1680)."""
    for module, (down, up) in sorted(modules.items()):
        if not lora_change_finite(up, down, scale):
            raise ModelSourceError(refusal(path, module, "lora_up @ lora_down x alpha / rank"))
