"""The reader of kohya / ComfyUI / OneTrainer LoRA state dicts: `to_diffusers(kohya_sd, family)`
-> peft naming with its rank and alpha (the inverse of lora/convert.py's `to_kohya`; the layouts
are described there). Every key is one of the family's layout, ComfyUI's generic spelling or
OneTrainer's, else refused naming it (ConfigError): nothing of a file is dropped without a word.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from functools import partial

import torch

from lorastudio.lora import names, onetrainer_names

# what the writer and the reader share (the one definition of each layout's rules)
from lorastudio.lora.convert import (
    _A,
    _B,
    _BFL,
    _DOWN,
    _UP,
    PeftLora,
    _check_family,
    _fused_dims,
    _problem,
    _swap_halves,
    fold_module_scales,
)


def to_diffusers(tensors: Mapping[str, torch.Tensor], family: str) -> PeftLora:
    """The family's kohya/ComfyUI state dict -> peft state dict + rank + alpha.

    A missing `.alpha` means alpha = rank (kohya's default). Layers of several ranks or
    alpha / rank come back with each one's scale folded into its lora_B (alpha = rank). Raises
    ConfigError for keys of another layout or a fused layer of the wrong shape.
    """
    family = names.kohya_layout(family)
    _check_family(family)
    layers = _kohya_layers(tensors, family)
    out: dict[str, torch.Tensor] = {}
    scales: dict[str, tuple[int, float]] = {}
    for (native, diffusers_name), (down, up, alpha) in layers.items():
        if diffusers_name:  # OneTrainer's layer: already one diffusers module
            split = [(native, down, up, float(down.shape[0]) if alpha is None else alpha)]
        else:
            split = _split_layer(native, down, up, alpha, family)
        for module, a, b, part_alpha in split:
            if module + _A in out:  # e.g. OneTrainer's to_q beside kohya's fused qkv
                raise _problem(f"layer {module} is in the file twice (under two spellings)")
            out[module + _A], out[module + _B] = a, b
            scales[module] = (a.shape[0], part_alpha)
    if not out:
        raise _problem("the file has no LoRA layers")
    kinds = {(r, round(alpha, 5)) for r, alpha in scales.values()}
    if len(kinds) == 1:
        ((rank, alpha),) = kinds
        return PeftLora(out, rank, alpha)
    # layers of several ranks or alpha / rank (kohya's dynamic resize, per-layer alphas): each
    # layer's own scale folded into its lora_B, alpha = rank (the most layers' rank)
    rank = Counter(r for r, _ in scales.values()).most_common(1)[0][0]
    return fold_module_scales(PeftLora(out, rank, float(rank)), {m: a / r for m, (r, a) in scales.items()})


_GENERIC = "diffusion_model."  # ComfyUI's generic spelling: the checkpoint's dotted module names
# OneTrainer's spelling (modules/module/LoRAModule.py LoRAModuleWrapper, its "legacy diffusers"
# names in modules/util/convert/lora/): `lora_transformer_<diffusers name, "_" for ".">` with
# lora_down / lora_up / .alpha, q, k, v apart; read for FLUX.1's layout, which diffusers'
# FluxPipeline reads too (lora_conversion_utils' `lora_transformer_` branch), and for Qwen-Image's
# and Z-Image's (their savers keep the wrapper's names: modelSaver/qwen/QwenLoRASaver.py), each
# name resolved against the family's real module names (lora/onetrainer_names.py)
_ONETRAINER = "lora_transformer_"
_ONETRAINER_LAYOUTS: dict[str, Callable[[str], str]] = {
    "flux": names.flux_from_flat,
    **{f: partial(onetrainer_names.from_flat, family=f) for f in onetrainer_names.FAMILIES},
}
# families whose `lora_unet_` files name diffusers' modules ("_" for "."), resolved as OneTrainer's
# are (lora/onetrainer_names.py): Z-Image's (musubi-tuner; diffusers' Z-Image reader takes them)
_UNET_DIFFUSERS_NAMES = frozenset({"z-image"})
_PARTS = {_DOWN: "down", _A: "down", _UP: "up", _B: "up", ".alpha": "alpha"}
# ComfyUI's full differences (comfy/lora.py load_lora: W + s * diff), which its trainer node
# writes beside its LoRA pairs: read only when all zero (they change nothing then)
_DIFFS = (".diff", ".diff_b")


def _kohya_layers(
    tensors: Mapping[str, torch.Tensor], family: str
) -> dict[tuple[str, bool], tuple[torch.Tensor, torch.Tensor, float | None]]:
    """kohya keys -> {(dotted module name, whether it is a diffusers name): (down, up, alpha or
    None)}. Besides the family's own layout (module docstring) this reads ComfyUI's generic
    spelling of any family, `diffusion_model.<dotted checkpoint name>` with lora_A / lora_B or
    lora_down / lora_up (comfy/lora.py maps every layer so; ai-toolkit writes Qwen-Image so), as
    the same layers, and OneTrainer's `lora_transformer_<diffusers name>` in FLUX.1's,
    Qwen-Image's and Z-Image's layouts (_ONETRAINER), whose names are diffusers'. ComfyUI's
    `.diff` / `.diff_b` (its trainer node's files) are skipped when all zero, else refused."""
    peft_suffixed = family in names.PEFT_SUFFIXED
    own = ("diffusion_model.", _A) if peft_suffixed else ("lora_unet_", _DOWN)
    onetrainer = _ONETRAINER_LAYOUTS.get(family)
    parts: dict[tuple[str, bool], dict[str, torch.Tensor]] = defaultdict(dict)
    for key, value in tensors.items():
        if key.endswith(_DIFFS) and key.startswith((_GENERIC, "lora_unet_")):
            if bool(value.any()):
                raise _problem(
                    f"{key!r} is a full difference of a weight or bias (ComfyUI's trainer node writes "
                    "one for every bias and norm weight): no LoRA layout holds it, so this would drop "
                    "it; `lorastudio generate` applies such a file whole, as ComfyUI does"
                )
            continue  # all zero: it changes nothing
        suffix = next((s for s in _PARTS if key.endswith(s)), None)
        generic = key.startswith(_GENERIC)
        theirs = onetrainer is not None and key.startswith(_ONETRAINER)
        # musubi-tuner's Z-Image files: `lora_unet_<diffusers name, "_" for ".">`, which diffusers'
        # Z-Image reader takes (lora_conversion_utils' _convert_non_diffusers_z_image_lora_to_diffusers)
        musubi = family in _UNET_DIFFUSERS_NAMES and key.startswith("lora_unet_")
        if suffix is None or not (
            generic or theirs or musubi or (key.startswith("lora_unet_") and not peft_suffixed)
        ):
            raise _problem(f"{key!r} is not a {family} kohya/ComfyUI key ({own[0]}<module>{own[1]} ...)")
        if onetrainer is not None and (theirs or musubi):
            prefix = _ONETRAINER if theirs else "lora_unet_"
            layer = (onetrainer(key[len(prefix) : -len(suffix)]), True)
        elif family == "sdxl" and not generic:
            layer = onetrainer_names.sdxl_layer(key[len("lora_unet_") : -len(suffix)])
        else:
            flat = key[len(_GENERIC if generic else "lora_unet_") : -len(suffix)]
            layer = (flat if generic else names.undot(flat, family), False)
        if _PARTS[suffix] in parts[layer]:
            raise _problem(
                f"layer {layer[0]} has its {_PARTS[suffix]} matrix twice ({key!r} and another spelling)"
            )
        parts[layer][_PARTS[suffix]] = value
    layers = {}
    for layer, found in parts.items():
        if "down" not in found or "up" not in found:
            raise _problem(f"layer {layer[0]} lacks its down (lora_A) or up (lora_B) matrix")
        alpha = float(found["alpha"].item()) if "alpha" in found else None
        layers[layer] = (found["down"], found["up"], alpha)
    return layers


def _split_layer(
    native: str, down: torch.Tensor, up: torch.Tensor, alpha: float | None, family: str
) -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    """One kohya layer -> [(diffusers module, A, B, alpha)] (several for a fused FLUX linear or
    Z-Image's `attention.qkv` under ComfyUI's own name)."""
    rank = down.shape[0]
    alpha = float(rank) if alpha is None else alpha
    if family == "z-image":  # diffusers' names, or ComfyUI's own (its fused attention.qkv: q, k, v)
        parts = names.z_image_from_comfy(native)
        return [(parts[0], down, up, alpha)] if len(parts) == 1 else _unfuse(parts, down, up, alpha)
    if family not in _BFL:
        return [(names.from_original(native, family), down, up, alpha)]
    modules = _BFL[family][1](native)
    if len(modules) == 1:
        b = _swap_halves(up) if native == names.FLUX_SWAPPED else up
        return [(modules[0], down, b, alpha)]
    return _unfuse(modules, down, up, alpha)


def _unfuse(
    modules: list[str], down: torch.Tensor, up: torch.Tensor, alpha: float
) -> list[tuple[str, torch.Tensor, torch.Tensor, float]]:
    k = len(modules)
    dims = _fused_dims(k, down.shape[1], up.shape[0] // 3 if k == 3 else 0)
    if sum(dims) != up.shape[0]:
        raise _problem(f"fused layer for {modules[0]}: {up.shape[0]} output rows, expected {sum(dims)}")
    rows = torch.split(up, dims, dim=0)
    rank = down.shape[0]
    if rank % k == 0 and _block_diagonal(rows, rank // k):
        r = rank // k
        out = []
        for p, (module, b_rows) in enumerate(zip(modules, rows, strict=True)):
            a, b = down[p * r : (p + 1) * r], b_rows[:, p * r : (p + 1) * r]
            if torch.count_nonzero(a) or torch.count_nonzero(b):
                out.append((module, a.contiguous(), b.contiguous(), alpha / k))
        return out
    # a shared down projection (other trainers): every part keeps the whole rank
    return [(m, down.clone(), b.contiguous(), alpha) for m, b in zip(modules, rows, strict=True)]


def _block_diagonal(rows: tuple[torch.Tensor, ...], r: int) -> bool:
    for p, block in enumerate(rows):
        outside = torch.cat([block[:, : p * r], block[:, (p + 1) * r :]], dim=1)
        if torch.count_nonzero(outside):
            return False
    return True
