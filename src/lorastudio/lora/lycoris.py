"""Pure conversions between peft's DoRA / LoHa / LoKr state dicts and the LyCORIS key layout that
ComfyUI reads (comfy/weight_adapter/loha.py, lokr.py, lora.py + base.py `weight_decompose`), and
ComfyUI's portability check for such files. `dict -> dict` functions on tensors; no model here.

Hand-written because no library converts peft's LyCORIS-style adapters to ComfyUI's names
(diffusers' lora_conversion_utils only reads LyCORIS files into LoRA, and peft writes its own keys).

Layout: every adapted module under one name that ComfyUI's key map has for every family
(lora/comfy.py `comfy_key_map`): "lycoris_" + <diffusers module name, "." -> "_">, but a LoKr
layer of GENERIC_LOKR_FAMILIES "diffusion_model." + <diffusers module name> and an SDXL LoHa / LoKr
layer (KOHYA_SPELLED) "lora_unet_" + <SGM name, "." -> "_"> (`layer_key`), with the keys
ComfyUI's readers look up (quoted from their `load`):
  loha  "{x}.hada_w1_a", "{x}.hada_w1_b", "{x}.hada_w2_a", "{x}.hada_w2_b" (+ "{x}.alpha")
  lokr  "{x}.lokr_w1" or "{x}.lokr_w1_a" + "{x}.lokr_w1_b"; "{x}.lokr_w2" or "{x}.lokr_w2_a" +
        "{x}.lokr_w2_b" (+ "{x}.alpha")
  dora  "{x}.lora_up.weight", "{x}.lora_down.weight", "{x}.alpha", "{x}.dora_scale"
peft's tensors have the same shapes and meaning under these names (peft: "<module>.hada_w1_a",
"<module>.lokr_w1", "<module>.lora_A.weight" / "lora_B.weight" / "lora_magnitude_vector").

Scales (ComfyUI's `calculate_weight`, restated in `comfy_delta`):
  loha  delta = (w1_a @ w1_b) * (w2_a @ w2_b) * alpha / w1_b.shape[0]   (= peft's alpha / r)
  lokr  delta = kron(w1, w2) * alpha / dim, dim = the rank of the low-rank factor (w2's when both
        are); scale 1 when neither is low-rank (ComfyUI then ignores .alpha): peft's alpha / r is
        folded into lokr_w1 for such modules (the .alpha written is then the rank).
  dora  ComfyUI (0.3.77 and later) with a [out, 1] dora_scale ([out, 1, 1, 1] for a conv, whose
        kernel counts as part of its row): W' = (W + delta) * dora_scale / ||W|| per output row; peft's DoRA: W' = m * (W + delta) / ||W + delta||. So dora_scale =
        m * ||W|| / ||W + delta||, which needs the base weights: the caller passes it.

Checked against ComfyUI's own code: bench/comfyui_check.py runs ComfyUI v0.19.3's
`load_lora_for_models` + `patch_weight_to_device` on DoRA, LoHa and LoKr files (full and low-rank
w1 / w2) of tiny runs of every family it has: every key loads, every patched weight is peft's
merged weight (lora/comfy.py COMFYUI_LOADER).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

PREFIX = "lycoris_"
GENERIC = "diffusion_model."
# families whose LoKr layers are written GENERIC + <diffusers module name> (ai-toolkit's spelling),
# the one spelling that both ComfyUI (its z_image_to_diffusers map; ComfyUI's own loader ran on it:
# bench/comfyui_check.py, session 38, upstream de6b062f) and diffusers 0.42's Z-Image reader
# (`_convert_non_diffusers_lokr_to_diffusers`) read: diffusers' reader takes no `lycoris_` key.
# Files of the older `lycoris_` spelling are still read (generation and init_lora through
# generate/lycoris_names.py, which maps both).
GENERIC_LOKR_FAMILIES = frozenset({"z-image"})
# family -> the adapters whose layers are written under the family's kohya LoRA names
# ("lora_unet_" + <SGM name, "_" for ".">: kohya sd-scripts' LyCORIS networks' spelling), the one
# spelling that A1111's built-in Lora extension matches (its load_network maps only `lora_unet_` /
# `lora_te*_` names: a `lycoris_` layer is left unmatched, session 39 portable3) and that ComfyUI,
# Forge and LyCORIS' own kohya loader read too. SDXL's DoRA keeps `lycoris_`: under kohya's names
# diffusers' SDXL reader would load its dora_scale as peft's magnitude (another reading) where it
# now refuses the file (RELIABILITY's Known problems: the LyCORIS-layout DoRA's dora_scale).
KOHYA_SPELLED = {"sdxl": frozenset({"loha", "lokr"})}
KOHYA = "lora_unet_"
# peft parameter name -> ComfyUI key suffix, per adapter
PEFT_TO_LYCORIS: dict[str, dict[str, str]] = {
    "loha": {n: n for n in ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")},
    "lokr": {n: n for n in ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b")},
    "dora": {
        "lora_A.weight": "lora_down.weight",
        "lora_B.weight": "lora_up.weight",
        "lora_magnitude_vector": "dora_scale",
    },
}
# every key suffix ComfyUI's LoHa / LoKr / LoRA readers consume for a module (Tucker and mid
# tensors included, which we never write)
COMFY_SUFFIXES: frozenset[str] = frozenset(
    {
        "alpha", "dora_scale", "lora_up.weight", "lora_down.weight", "lora_mid.weight",
        "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2",
        "lokr_w1", "lokr_w2", "lokr_w1_a", "lokr_w1_b", "lokr_w2_a", "lokr_w2_b", "lokr_t2",
    }
)  # fmt: skip


# ComfyUI's full differences (comfy/lora.py `load_lora`): `.diff` a weight's (a norm's 1-D weight
# in the files ComfyUI's own trainer node writes, comfy_extras/nodes_train.py), `.diff_b` a bias's,
# added at the strength: W + s * diff. Read by generation's merge only (generate/lycoris_patch.py);
# lorastudio never writes them.
COMFY_DIFF_SUFFIXES: frozenset[str] = frozenset({"diff", "diff_b"})


class LycorisError(ValueError):
    """A state dict that is not of the adapter / layout it should be."""


def module_key(module: str) -> str:
    """The LyCORIS name of a diffusers module ("lycoris_" + its name with "." -> "_")."""
    return PREFIX + module.replace(".", "_")


def generic_spelling(family: str, adapter: str) -> bool:
    """Whether `family`'s `adapter` file names its layers GENERIC + <diffusers module name>
    (GENERIC_LOKR_FAMILIES' LoKr) rather than `module_key`'s."""
    return adapter == "lokr" and family in GENERIC_LOKR_FAMILIES


def kohya_spelling(family: str, adapter: str) -> bool:
    """Whether `family`'s `adapter` file names its layers by the family's kohya LoRA names
    (KOHYA_SPELLED) rather than `module_key`'s."""
    return adapter in KOHYA_SPELLED.get(family, ())


def layer_key(module: str, generic: bool = False, kohya: bool = False) -> str:
    """The name a written file gives the diffusers `module`: `module_key`'s, with `generic`
    GENERIC + the module's own name (dots kept), with `kohya` (SDXL only) KOHYA + its SGM name
    ("_" for "."), or `module_key`'s for a layer lora/names.py's SGM table does not name (the
    down / upsamplers' convs and the norms: ComfyUI maps those `lycoris_` names too, A1111
    leaves them unmatched)."""
    if kohya:
        from lorastudio.errors import ConfigError
        from lorastudio.lora.names import sdxl_to_original

        try:
            return KOHYA + sdxl_to_original(module).replace(".", "_")
        except ConfigError:
            return module_key(module)
    return GENERIC + module if generic else module_key(module)


def split_peft(tensors: Mapping[str, torch.Tensor], adapter: str) -> dict[str, dict[str, torch.Tensor]]:
    """peft state dict of `adapter` -> {module: {peft parameter name: tensor}}. Raises
    LycorisError for a key that is not one of the adapter's parameters."""
    names = PEFT_TO_LYCORIS.get(adapter)
    if names is None:
        raise LycorisError(f"no LyCORIS layout for adapter {adapter!r}; known: {', '.join(PEFT_TO_LYCORIS)}")
    out: dict[str, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, value in tensors.items():
        param = next((n for n in sorted(names, key=len, reverse=True) if key.endswith("." + n)), None)
        if param is None:
            raise LycorisError(f"{key!r} is not a parameter of a peft {adapter} adapter")
        out[key[: -len(param) - 1]][param] = value
    return dict(out)


def peft_to_lycoris(
    tensors: Mapping[str, torch.Tensor],
    adapter: str,
    scales: Mapping[str, tuple[int, float]],
    dora_scale: Mapping[str, torch.Tensor] | None = None,
    generic: bool = False,
    kohya: bool = False,
) -> dict[str, torch.Tensor]:
    """peft state dict of a "loha" / "lokr" / "dora" adapter (diffusers module names, no file
    prefix) -> the LyCORIS state dict ComfyUI reads (module docstring).

    Args:
        tensors: peft's tensors ("<module>.hada_w1_a", ...).
        adapter: "loha", "lokr" or "dora".
        scales: {module: (rank, alpha)} as peft resolved them (training.adapters.lora.module_scales).
        dora_scale: DoRA only: {module: [out, 1] tensor ([out, 1, 1, 1] for a conv)} =
            m * ||W|| / ||W + delta|| per row.
        generic: name the layers GENERIC + <diffusers name> (`generic_spelling`), not "lycoris_".
        kohya: name the layers KOHYA + <SGM name> (`kohya_spelling`: SDXL), not "lycoris_".
    Raises LycorisError (unknown keys, a module without its scale / DoRA scale).
    """
    out: dict[str, torch.Tensor] = {}
    rename = PEFT_TO_LYCORIS.get(adapter, {})
    for module, params in split_peft(tensors, adapter).items():
        if module not in scales:
            raise LycorisError(f"no rank / alpha for module {module}")
        rank, alpha = scales[module]
        x = layer_key(module, generic, kohya)
        params = dict(params)
        if adapter == "dora":
            if dora_scale is None or module not in dora_scale:
                raise LycorisError(f"no DoRA scale for module {module}")
            params["lora_magnitude_vector"] = dora_scale[module]
        if adapter == "lokr" and "lokr_w1_a" not in params and "lokr_w2_a" not in params:
            params["lokr_w1"] = params["lokr_w1"] * (alpha / rank)  # ComfyUI's scale is 1 here
            alpha = float(rank)
        for name, value in params.items():
            out[f"{x}.{rename[name]}"] = value.contiguous()
        out[f"{x}.alpha"] = torch.tensor(float(alpha))
    return out


def group_modules(
    tensors: Mapping[str, Any], suffixes: frozenset[str] = COMFY_SUFFIXES
) -> dict[str, dict[str, Any]]:
    """LyCORIS keys -> {module key x: {suffix: value}} (x = everything before the suffix, one of
    `suffixes`)."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for key, value in tensors.items():
        suffix = next((s for s in suffixes if key.endswith("." + s)), None)
        if suffix is None:
            raise LycorisError(f"{key!r} is not a key ComfyUI's LoRA / LoHa / LoKr readers consume")
        out[key[: -len(suffix) - 1]][suffix] = value
    return dict(out)


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if hasattr(value, "shape") else tuple(value)


def _matrix(value: Any) -> tuple[int, int]:
    """(rows, everything else) of a tensor or shape: a conv factor's kernel flattened into its row."""
    shape = _shape(value)
    return shape[0], math.prod(shape[1:])


def delta_shape(parts: Mapping[str, Any]) -> tuple[int, ...]:
    """The [out, in (x kernel)] shape of the weight a module's LyCORIS tensors (or their shapes)
    patch, a conv's kernel flattened into its row as ComfyUI reshapes the product onto the weight."""
    if "hada_w1_a" in parts:
        return (_matrix(parts["hada_w1_a"])[0], _matrix(parts["hada_w1_b"])[1])
    if "lora_up.weight" in parts:
        return (_matrix(parts["lora_up.weight"])[0], _matrix(parts["lora_down.weight"])[1])
    w1 = (
        _matrix(parts["lokr_w1"])
        if "lokr_w1" in parts
        else (_matrix(parts["lokr_w1_a"])[0], _matrix(parts["lokr_w1_b"])[1])
    )
    w2 = (
        _matrix(parts["lokr_w2"])
        if "lokr_w2" in parts
        else (_matrix(parts["lokr_w2_a"])[0], _matrix(parts["lokr_w2_b"])[1])
    )
    return (w1[0] * w2[0], w1[1] * w2[1])


def comfy_delta(parts: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The weight difference ComfyUI adds for one module's LoHa / LoKr tensors (strength 1;
    its `calculate_weight`, restated in fp32). [out, in]."""
    p = {k: v.float() for k, v in parts.items()}
    alpha = p.get("alpha")
    if "hada_w1_a" in p:
        scale = float(alpha) / p["hada_w1_b"].shape[0] if alpha is not None else 1.0
        return (p["hada_w1_a"] @ p["hada_w1_b"]) * (p["hada_w2_a"] @ p["hada_w2_b"]) * scale
    dim = None
    w1 = p.get("lokr_w1")
    if w1 is None:
        dim = p["lokr_w1_b"].shape[0]
        w1 = p["lokr_w1_a"] @ p["lokr_w1_b"]
    w2 = p.get("lokr_w2")
    if w2 is None:
        dim = p["lokr_w2_b"].shape[0]
        w2 = p["lokr_w2_a"] @ p["lokr_w2_b"]
    scale = float(alpha) / dim if alpha is not None and dim is not None else 1.0
    return torch.kron(w1, w2) * scale  # [out, in]


@dataclass
class LycorisCheck:
    """Would ComfyUI load every key of a LyCORIS file onto the model? Modules its key map lacks
    (`unconsumed`: every key of such a module) and modules whose patch has another shape than
    the weight (`mismatched`)."""

    unconsumed: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unconsumed and not self.mismatched

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": True,
            "ok": not self.unconsumed and not self.mismatched,
            "rules": "ComfyUI comfy/weight_adapter (lokr, loha, lora + dora_scale) key readers",
            "unconsumed": self.unconsumed,
            "mismatched": self.mismatched,
        }


def check_lycoris_keys(
    file_shapes: Mapping[str, tuple[int, ...]], key_map: Mapping[str, tuple[int, ...]]
) -> LycorisCheck:
    """ComfyUI's rules on a LyCORIS file's {key: shape}: each module name must be in its key map
    (lora/comfy.py comfy_key_map), each key one its readers consume, the patch the weight's shape
    and a dora_scale [out, 1] (a conv's [out, 1, 1, 1]: one per output row, on ComfyUI's output
    axis)."""
    result = LycorisCheck()
    try:
        modules = group_modules(file_shapes)
    except LycorisError as err:
        return LycorisCheck(unconsumed=[str(err)])
    for x, parts in sorted(modules.items()):
        if x not in key_map:
            result.unconsumed += sorted(f"{x}.{s}" for s in parts)
            continue
        full = tuple(key_map[x])
        target, row_scale = _matrix(full), (full[0], *[1] * (len(full) - 1))
        try:
            shape = delta_shape(parts)
        except KeyError as err:
            result.mismatched.append(f"{x}: missing {err.args[0]}")
            continue
        if shape != target or ("dora_scale" in parts and _shape(parts["dora_scale"]) != row_scale):
            result.mismatched.append(f"{x}: patch {shape} vs weight {target}")
    return result
