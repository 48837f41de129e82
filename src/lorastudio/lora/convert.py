"""Pure conversions between the diffusers/peft LoRA layout and the kohya / ComfyUI layout.

diffusers/peft ("peft state dict"): `<module>.lora_A.weight` [r, in] and `<module>.lora_B.weight`
[out, r] with diffusers module names and no file prefix; alpha lives outside (adapter config).

kohya / ComfyUI, per family (each with a `.alpha` scalar tensor per module):
  sdxl        lora_unet_<SGM name, "_" for ".">.lora_down.weight / .lora_up.weight
  flux        lora_unet_<BFL name>.lora_down / .lora_up; q,k,v (and proj_mlp in single blocks)
              are ONE fused linear there: down = concat of the parts' A [k*r, in], up =
              block-diagonal of the parts' B [sum(out), k*r], alpha = k * alpha (same scale);
              parts not trained are zero blocks (dropped again on the way back)
  flux2, flux2-klein  the same with FLUX.2's BFL names (lora/names_flux2.py): only the dual
              blocks' q,k,v are fused (the single blocks' linear1 is fused in diffusers too)
  qwen-image  lora_unet_<diffusers name>.lora_down / .lora_up (ComfyUI's names are diffusers')
  z-image     diffusion_model.<diffusers name>.lora_A / .lora_B (ComfyUI maps these onto its fused
              attention.qkv itself)
  chroma      FLUX.1's layout (its checkpoint keeps FLUX.1's names: names.KOHYA_LAYOUT_OF)
  qwen-image-edit  Qwen-Image's layout (the same transformer: names.KOHYA_LAYOUT_OF)
  OneTrainer  lora_transformer_<diffusers name, "_" for ".">.lora_down / .lora_up / .alpha, read
              (never written) for FLUX.1's layout (flux, chroma, flux-kontext): q, k, v apart,
              and Qwen-Image's (qwen-image, qwen-image-edit) and Z-Image's; SDXL's
              lora_unet_<diffusers U-Net name, "_" for "."> beside kohya's SGM names (read)
  text encoders  split off before these (lora/text_encoders.py, lora/text_encoder_names.py)
  krea2       diffusion_model.<original name>.lora_A / .lora_B, no .alpha: alpha / rank folded
              into lora_B (diffusers' Krea 2 reader refuses other keys); a round trip keeps each
              layer's weight change, with alpha = rank

This module holds the writer, `to_kohya(peft_sd, family, alpha)` (peft -> the family's kohya
layout), and what both directions share (PeftLora, the strength folds, the fused-linear sizes);
the reader of every kohya / ComfyUI / OneTrainer spelling, `to_diffusers(kohya_sd, family)`, is
lora/convert_read.py. The two are inverse: a round trip returns equal tensors (torch.equal) and
the same alpha (krea2: the same weight change).

`fold_strength(lora)` puts alpha/rank into lora_B (alpha becomes rank): the diffusers layout is
written so, because ComfyUI reads alpha only from per-module `.alpha` tensors (none in a diffusers
file: it patches with scale 1.0) while diffusers reads it from the header; with alpha = rank both
apply the same weight, whatever loader reads the file.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError
from lorastudio.lora import names, names_flux2

FAMILIES = ("sdxl", "flux", "qwen-image", "z-image", "flux2", "flux2-klein", "krea2")
# families whose kohya layout is the BFL checkpoint's, with fused linears:
# (diffusers name -> (BFL name, part or None), BFL name -> diffusers names)
_BFL: dict[str, tuple[Callable[[str], tuple[str, int | None]], Callable[[str], list[str]]]] = {
    "flux": (names.flux_to_original, names.flux_from_original),
    "flux2": (names_flux2.to_original, names_flux2.from_original),
    "flux2-klein": (names_flux2.to_original, names_flux2.from_original),
}
_A, _B = ".lora_A.weight", ".lora_B.weight"
_DOWN, _UP = ".lora_down.weight", ".lora_up.weight"


@dataclass(frozen=True)
class PeftLora:
    """A LoRA in peft naming: tensors keyed `<module>.lora_A.weight` / `.lora_B.weight`; every
    module's weight change is (alpha / rank) * B @ A. `rank` is the LoRA's (most layers'); a layer
    of another rank (peft's rank_pattern) has the same scale alpha / rank, its own strength folded
    into its lora_B by the reader (lora.files.peft_from_file, to_diffusers)."""

    tensors: dict[str, torch.Tensor]
    rank: int
    alpha: float


def fold_strength(lora: PeftLora) -> PeftLora:
    """The same adapter with alpha/rank folded into every lora_B and alpha = rank, so that a loader
    that ignores alpha (scale 1.0) applies the intended weight (alpha/rank) * B @ A. Raises
    ModelSourceError for a scale that takes a lora_B past its dtype's range (fold_module_scales)."""
    scale = lora.alpha / lora.rank
    if scale == 1.0:
        return lora
    return fold_module_scales(lora, {k.removesuffix(_B): scale for k in lora.tensors if k.endswith(_B)})


def pattern_scales(
    modules: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    rank: int,
    alpha: float,
    rank_pattern: Mapping[str, int],
    alpha_pattern: Mapping[str, float],
    rslora: bool = False,
) -> dict[str, float]:
    """Each module's scale alpha_m / r_m by peft's rule (LoraModel: a rank_pattern / alpha_pattern
    key matching the module's name, else r / lora_alpha); alpha_m / sqrt(r_m) with `rslora` (the
    adapter config's use_rslora, which peft's LoraLayer.update_layer and so diffusers' loader
    apply). Raises ModelSourceError for a module whose tensors are not of the rank the adapter
    config gives it (peft would refuse to load it)."""
    if rank_pattern or alpha_pattern:
        from peft.utils.other import get_pattern_key
    else:  # no pattern: every module at r / lora_alpha (`import peft` imports transformers: ~3 s)

        def get_pattern_key(patterns: list[str], key: str) -> str:
            return key

    scales = {}
    for m, (a, _) in modules.items():
        r = int(rank_pattern.get(get_pattern_key(list(rank_pattern), m), rank))
        if a.shape[0] != r:
            raise ModelSourceError(
                f"layer {m} is of rank {a.shape[0]} but the file's adapter config says {r}"
                " (lora_adapter_metadata: r, rank_pattern)"
            )
        alpha_m = float(alpha_pattern.get(get_pattern_key(list(alpha_pattern), m), alpha))
        scales[m] = alpha_m / math.sqrt(r) if rslora else alpha_m / r
    return scales


def fold_module_scales(lora: PeftLora, scales: Mapping[str, float]) -> PeftLora:
    """`lora` with each module's own scale (`scales`: module -> alpha_m / r_m) folded into its
    lora_B: a PeftLora of scale 1 (alpha = rank) in every layer, whatever their ranks. Raises
    ModelSourceError for a scale that takes a lora_B past its dtype's range (an alpha of 1e30
    beside F16 weights: inf, every image black)."""
    tensors = {}
    for key, value in lora.tensors.items():
        module = key.removesuffix(".lora_B.weight")
        tensors[key] = value * scales[module] if module != key and scales[module] != 1.0 else value
        if module != key and not bool(torch.isfinite(tensors[key]).all()):
            raise ModelSourceError(
                f"layer {module[:120]}: its alpha / rank ({scales[module]:g}) scales its weights past"
                f" what {str(value.dtype).removeprefix('torch.')} holds (inf)"
            )
    return PeftLora(tensors, lora.rank, float(lora.rank))


def _problem(message: str) -> ConfigError:
    return ConfigError([FieldProblem("lora", message)])


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise _problem(f"no kohya layout for family {family!r}; known: {', '.join(FAMILIES)}")


def peft_modules(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """`<module>.lora_A/B.weight` tensors -> {module: (A [r, in], B [out, r])}.
    Raises ConfigError for a key of another shape or a module missing its A or B."""
    found: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, value in tensors.items():
        for suffix in (_A, _B):
            if key.endswith(suffix):
                found[key.removesuffix(suffix)][suffix] = value
                break
        else:
            if key.endswith(".lora_magnitude_vector"):
                raise _problem(
                    f"{key!r} is a DoRA's magnitude: convert, merge and resize take LoRA files only (a DoRA's"
                    " weight change is not B @ A, so no LoRA layout holds it); ComfyUI reads a DoRA written"
                    ' with lora_format = "kohya", diffusers this file'
                )
            raise _problem(f"not a peft LoRA key: {key!r}")
    broken = sorted(m for m, pair in found.items() if len(pair) != 2)
    if broken:
        raise _problem(f"LoRA layers missing lora_A or lora_B: {', '.join(broken)}")
    return {m: (pair[_A], pair[_B]) for m, pair in found.items()}


def to_kohya(
    tensors: Mapping[str, torch.Tensor], family: str, alpha: float, rank: int | None = None
) -> dict[str, torch.Tensor]:
    """peft state dict (diffusers module names, no prefix) -> the family's kohya/ComfyUI state
    dict, with a `.alpha` tensor per module: `alpha`, or with `rank` (the PeftLora's) alpha *
    r_m / rank for a module of rank r_m, so that a layer of another rank keeps the scale
    alpha / rank (kohya's loaders scale each layer by its .alpha / its own rank). Raises
    ConfigError for a layer with no kohya name."""
    family = names.kohya_layout(family)
    _check_family(family)
    modules = peft_modules(tensors)
    if rank is not None and any(a.shape[0] != rank for a, _ in modules.values()):
        scale = alpha / rank
        return _to_kohya_by_module(modules, family, scale)
    if family in _BFL:
        return _flux_to_kohya(modules, alpha, _BFL[family][0])
    out: dict[str, torch.Tensor] = {}
    for module, (a, b) in modules.items():
        if family in names.PEFT_SUFFIXED:
            base = f"diffusion_model.{names.to_original(module, family)}"
            if family in names.ALPHA_IN_B:
                out.update({base + _A: a, base + _B: b * (float(alpha) / a.shape[0])})
                continue
            out.update({base + _A: a, base + _B: b})
        else:
            native = names.to_original(module, family)
            base = "lora_unet_" + native.replace(".", "_")
            out.update({base + _DOWN: a, base + _UP: b})
        out[base + ".alpha"] = torch.tensor(float(alpha))
    return out


def _to_kohya_by_module(
    modules: dict[str, tuple[torch.Tensor, torch.Tensor]], family: str, scale: float
) -> dict[str, torch.Tensor]:
    """to_kohya of a LoRA whose layers differ in rank: the layers of each rank converted
    together with alpha = scale * that rank (a fused FLUX linear's parts must share one)."""
    by_rank: dict[int, dict[str, torch.Tensor]] = defaultdict(dict)
    for module, (a, b) in modules.items():
        by_rank[a.shape[0]].update({module + _A: a, module + _B: b})
    out: dict[str, torch.Tensor] = {}
    for r, part in by_rank.items():
        converted = to_kohya(part, family, scale * r)
        clash = sorted(set(converted) & set(out))
        if clash:
            fused = clash[0].rsplit(".", 1)[0]  # <layer>.alpha sorts first
            raise _problem(
                f"the parts of the fused layer {fused} have different ranks: the kohya layout holds one"
                " (keep the diffusers layout, or resize the LoRA to one rank first)"
            )
        out.update(converted)
    return out


def _swap_halves(up: torch.Tensor) -> torch.Tensor:
    """(scale, shift) rows <-> (shift, scale) rows of an adaLN output (self-inverse)."""
    first, second = up.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def _fused_dims(parts: int, in_features: int, part_out: int) -> list[int]:
    """Output rows of each part of a fused FLUX linear: 3 x hidden (+ 4 x hidden for proj_mlp)."""
    if parts == 4:
        return [in_features] * 3 + [names.FLUX_MLP_RATIO * in_features]
    return [part_out] * parts


def _flux_to_kohya(
    modules: dict[str, tuple[torch.Tensor, torch.Tensor]],
    alpha: float,
    to_original: Callable[[str], tuple[str, int | None]],
) -> dict[str, torch.Tensor]:
    fused: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = defaultdict(dict)
    out: dict[str, torch.Tensor] = {}
    for module, (a, b) in modules.items():
        native, part = to_original(module)
        if part is not None:
            fused[native][part] = (a, b)
            continue
        base = "lora_unet_" + native.replace(".", "_")
        up = _swap_halves(b) if native == names.FLUX_SWAPPED else b
        out.update({base + _DOWN: a, base + _UP: up, base + ".alpha": torch.tensor(float(alpha))})
    for native, present in fused.items():
        k = 4 if native.endswith("linear1") else 3
        a0, b0 = next(iter(present.values()))
        r, in_features = a0.shape
        if any(a.shape != a0.shape or b.shape[1] != r for a, b in present.values()):
            raise _problem(f"the parts of {native} have different ranks or inputs")
        dims = _fused_dims(k, in_features, b0.shape[0])
        down = torch.zeros(k * r, in_features, dtype=a0.dtype)  # [k*r, in]
        up = torch.zeros(sum(dims), k * r, dtype=b0.dtype)  # [sum(out), k*r], block diagonal
        for p, (a, b) in present.items():
            start = sum(dims[:p])
            down[p * r : (p + 1) * r] = a
            up[start : start + dims[p], p * r : (p + 1) * r] = b
        base = "lora_unet_" + native.replace(".", "_")
        out.update({base + _DOWN: down, base + _UP: up, base + ".alpha": torch.tensor(float(alpha) * k)})
    return out


def unmapped_layers(family: str, modules: list[str]) -> list[str]:
    """The diffusers module names among `modules` that have no name in the family's kohya layout
    (for a preflight check of lora_format="kohya" before training starts)."""
    family = names.kohya_layout(family)
    _check_family(family)
    missing = []
    for module in modules:
        try:
            if family in _BFL:
                _BFL[family][0](module)
            else:
                names.to_original(module, family)
        except ConfigError:
            missing.append(module)
    return missing
