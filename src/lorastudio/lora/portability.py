"""The save-time portability check of a LoRA file: would ComfyUI, diffusers and (for SDXL)
A1111/Forge load every layer of it, at the strength the run trained?

    loaders = check_loaders(tensors, header, family, module_shapes, pipeline_class, unet_config)

- ComfyUI: its key map, consumption and strength rules, restated in `lorastudio.lora.comfy` (no
  installable ComfyUI exists to call at save time; bench/comfyui_check.py runs ComfyUI's own
  loader on the families' layouts of lora.comfy.COMFYUI_LOADER_CHECKED, and the result names
  it as "loader_checked"); the strength ComfyUI applies is compared with the one diffusers
  applies (the header's alpha / rank for a diffusers file; for a kohya file both read the
  per-layer `.alpha` tensor, so they agree by construction).
- diffusers: the pipeline's own `lora_state_dict` (the conversion `load_lora_weights` runs, no
  model needed) on the file, then every converted key must name a layer of the denoiser under its
  prefix (`unet.` / `transformer.`) with fitting shapes: `load_lora_weights` silently drops keys
  without the prefix, which is how a file can "load" and change nothing.
- diffusers and a LyCORIS LoKr file (`check_diffusers_lokr`): the same, its converted layers'
  Kronecker products against the layers' shapes, where the pipeline has a reader (FLUX.2's, Z-Image's).
- A1111/Forge (SDXL only; A1111 has no FLUX/Qwen-Image/Z-Image): kohya's `lora_unet_<SGM name>`
  keys with a `.alpha` per layer are what its Lora networks read; they are the names ComfyUI's
  native map consumes, so the ComfyUI check of a kohya SDXL file covers them.
- SDXL text-encoder LoRA (`clip_shapes` given: {encoder: {module: weight shape}}): ComfyUI's CLIP
  key map joins the denoiser's (lora/text_encoders.py); diffusers' converted `text_encoder.` /
  `text_encoder_2.` keys must land on a layer of that encoder, after the normalisation its
  text-encoder loader applies (old-diffusers -> peft names), like the denoiser's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from lorastudio import json_read
from lorastudio.lora.comfy import COMFYUI_LOADER_CHECKED, check_comfy_keys, comfy_key_map, comfyui_loader
from lorastudio.lora.files import ADAPTER_METADATA_KEY, denoiser_prefix, detect_layout
from lorastudio.lora.text_encoders import clip_key_map, file_module

Shape = tuple[int, ...]
_A, _B = ".lora_A.weight", ".lora_B.weight"
_M = ".lora_magnitude_vector"  # peft's DoRA magnitude in a diffusers-layout file: [out] ([1, out, 1, 1] on a conv)
_PLAIN_LORA = (_A, _B, ".lora_up.weight", ".lora_down.weight", ".alpha")


def diffusers_scale(header: Mapping[str, str], family: str) -> float | None:
    """alpha / r that diffusers applies to a diffusers-layout file (from its adapter metadata;
    alpha / sqrt(r) where it sets use_rslora, as peft does); None when the header records none
    (diffusers then uses alpha = rank: 1.0)."""
    if ADAPTER_METADATA_KEY not in header:
        return None
    prefix = denoiser_prefix(family) + "."
    packed = json_read.loads(header[ADAPTER_METADATA_KEY])
    r = packed.get(prefix + "r")
    alpha = packed.get(prefix + "lora_alpha", r)
    if not r:
        return None
    return float(alpha) / (math.sqrt(float(r)) if packed.get(prefix + "use_rslora") is True else float(r))


def check_comfyui(
    tensors: Mapping[str, torch.Tensor],
    header: Mapping[str, str],
    family: str,
    module_shapes: Mapping[str, Shape],
    clip_shapes: Mapping[str, Mapping[str, Shape]] | None = None,
) -> dict[str, Any]:
    """ComfyUI's key, shape and strength check of a file (see lorastudio.lora.comfy), the text
    encoders' keys too when `clip_shapes` is given."""
    layout = detect_layout(tensors)
    expected = (diffusers_scale(header, family) or 1.0) if layout == "diffusers" else None
    alphas = {k: float(v.item()) for k, v in tensors.items() if k.endswith(".alpha")}
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    key_map = {**comfy_key_map(family, module_shapes), **clip_key_map(clip_shapes or {})}
    result = check_comfy_keys(shapes, key_map, alphas, expected).to_json()
    plain = all(k.endswith(_PLAIN_LORA) for k in tensors)  # not LyCORIS / DoRA: what the check ran on
    # this layout went through ComfyUI's own loader (bench/comfyui_check.py); with text encoders,
    # the kohya one (bench/comfyui_te_check.py: its CLIP loading too)
    if layout in COMFYUI_LOADER_CHECKED.get(family, ()) and plain and (not clip_shapes or layout == "kohya"):
        result["loader_checked"] = comfyui_loader(family)
    return result


def check_diffusers(
    tensors: Mapping[str, torch.Tensor],
    family: str,
    module_shapes: Mapping[str, Shape],
    pipeline_class: str,
    unet_config: Any = None,
    clip_shapes: Mapping[str, Mapping[str, Shape]] | None = None,
) -> dict[str, Any]:
    """Run diffusers' own `<pipeline_class>.lora_state_dict` on the file and check that every key
    it yields lands on a layer of the denoiser, or of a text encoder in `clip_shapes` (see the
    module docstring)."""
    import diffusers

    cls = getattr(diffusers, pipeline_class)
    kwargs = {"unet_config": unet_config} if family == "sdxl" and unet_config is not None else {}
    rules = f"diffusers {diffusers.__version__} {pipeline_class}.lora_state_dict"
    try:
        out = cls.lora_state_dict(dict(tensors), **kwargs)
    except (ValueError, KeyError, IndexError, RuntimeError, AttributeError, AssertionError) as err:
        reason = (str(err).splitlines() or [type(err).__name__])[0]
        return {"checked": True, "ok": False, "rules": rules, "error": reason[:300]}
    from diffusers.utils import convert_unet_state_dict_to_peft

    converted = out[0] if isinstance(out, tuple) else out
    prefix = denoiser_prefix(family) + "."
    clip = dict(clip_shapes or {})
    encoders = tuple(f"{e}." for e in clip)
    dropped = sorted(k for k in converted if not k.startswith((prefix, *encoders)))  # the loaders' filter
    ours = {k.removeprefix(prefix): v for k, v in converted.items() if k.startswith(prefix)}
    if ours and "lora_A" not in next(iter(ours)):  # load_lora_adapter's own normalisation
        ours = convert_unet_state_dict_to_peft(ours)
    unknown, mismatched, loaded = [], [], 0
    for name, value in ours.items():
        key = prefix + name
        suffix = next((s for s in (_A, _B, _M) if name.endswith(s)), None)
        module = name.removesuffix(suffix) if suffix else name
        if suffix is None or module not in module_shapes:
            unknown.append(key)
            continue
        target = module_shapes[module]
        if suffix == _M:  # one magnitude per output row (diffusers hands it to peft's DoRA layer)
            fits = value.numel() == target[0]
        else:
            dim, want = (1, target[1]) if suffix == _A else (0, target[0])
            fits = value.shape[dim] == want
        if not fits:
            mismatched.append(f"{key}: {tuple(value.shape)} vs layer {target}")
        loaded += 1
    # a layer of the file that diffusers' conversion left out (its kohya FLUX.2 converter drops
    # what it does not map with a logged warning): the file's own layers by lorastudio's reader
    absent = sorted(set(_file_layers(tensors, family)) - {n.rsplit(".lora_", 1)[0] for n in ours})
    dropped += [f"{prefix}{m} (left out by the conversion)" for m in absent]
    for encoder, shapes in clip.items():
        te_loaded, te_unknown, te_mismatched = _check_text_encoder(converted, encoder, shapes)
        loaded, unknown, mismatched = loaded + te_loaded, unknown + te_unknown, mismatched + te_mismatched
    ok = loaded > 0 and not (dropped or unknown or mismatched)
    return {
        "checked": True,
        "ok": ok,
        "rules": rules,
        "loaded": loaded,
        "dropped": dropped[:20],
        "unknown": sorted(unknown)[:20],
        "mismatched": mismatched[:20],
    }


def check_loaders(
    tensors: Mapping[str, torch.Tensor],
    header: Mapping[str, str],
    family: str,
    module_shapes: Mapping[str, Shape],
    pipeline_class: str,
    unet_config: Any = None,
    clip_shapes: Mapping[str, Mapping[str, Shape]] | None = None,
) -> dict[str, Any]:
    """{"comfyui": {...}, "diffusers": {...}, "a1111_forge": {...}}: each {"checked", "ok", ...}
    (see the module docstring); the sidecar records it under "loaders"."""
    comfy = check_comfyui(tensors, header, family, module_shapes, clip_shapes)
    result = {
        "comfyui": comfy,
        "diffusers": check_diffusers(
            tensors, family, module_shapes, pipeline_class, unet_config, clip_shapes
        ),
    }
    if family == "sdxl":
        kohya = detect_layout(tensors) == "kohya"
        reason = None  # why it is not ok: always said (the CLI's warning names it)
        if not kohya:
            reason = "A1111/Forge read kohya names: lora_format=kohya"
        elif not comfy["ok"]:
            reason = "Forge reads kohya names through ComfyUI's map, whose check failed (comfyui)"
        result["a1111_forge"] = {
            "checked": True,
            "ok": reason is None,
            "rules": "kohya lora_unet_<SGM name> keys + .alpha (ComfyUI's native map covers the same names)",
            **({"reason": reason} if reason else {}),
        }
    else:
        result["a1111_forge"] = {
            "checked": False,
            "reason": f"A1111 has no {family}; Forge uses ComfyUI's map",
        }
    return result


def _file_layers(tensors: Mapping[str, torch.Tensor], family: str) -> list[str]:
    """The denoiser's diffusers modules a file holds a layer of, by lorastudio's reader
    (lora/files.peft_from_file); none where that reader does not take the file (the check then
    rests on diffusers' conversion alone)."""
    from lorastudio.errors import ConfigError, ModelSourceError
    from lorastudio.lora.files import peft_from_file
    from lorastudio.lora.text_encoders import split_text_encoders

    denoiser, _ = split_text_encoders(tensors)
    try:
        lora = peft_from_file(denoiser, {}, family)
    except (ConfigError, ModelSourceError, ValueError):
        return []
    return sorted({k.removesuffix(_A) for k in lora.tensors if k.endswith(_A)})


_LOKR = ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b")


def _kron_shape(factors: Mapping[str, torch.Tensor]) -> Shape | None:
    """The (out, in) of a LoKr layer's Kronecker product w1 (x) w2, each factor full or low-rank
    (a @ b); None when a factor is missing."""
    sides = []
    for w in ("lokr_w1", "lokr_w2"):
        if w in factors:
            sides.append(tuple(factors[w].shape[:2]))
        elif f"{w}_a" in factors and f"{w}_b" in factors:
            sides.append((factors[f"{w}_a"].shape[0], factors[f"{w}_b"].shape[1]))
        else:
            return None
    (o1, i1), (o2, i2) = sides
    return (o1 * o2, i1 * i2)


def check_diffusers_lokr(
    tensors: Mapping[str, torch.Tensor], family: str, module_shapes: Mapping[str, Shape], pipeline_class: str
) -> dict[str, Any]:
    """diffusers' own reading of a LyCORIS-layout LoKr file: `<pipeline_class>.lora_state_dict`
    (diffusers 0.42 converts FLUX.2's and FLUX.2 klein's LyCORIS LoKr names, and Z-Image's
    `diffusion_model.<diffusers name>` ones, the spelling lora/lycoris.py writes for Z-Image; the
    other pipelines refuse the file or pass its names through onto no layer). {"checked": False, "reason"} where
    the reader refuses the file (its message in the reason: FLUX.2's refuses a layer outside its
    table) or no converted key lands on a layer of the denoiser; else the check
    of check_diffusers: every converted layer a layer of the denoiser whose weight has the
    Kronecker product's (out, in)."""
    import diffusers

    rules = f"diffusers {diffusers.__version__} {pipeline_class}.lora_state_dict"
    no_reader = {"checked": False, "reason": f"{rules} has no reader for LyCORIS lokr files of {family}"}
    try:
        out = getattr(diffusers, pipeline_class).lora_state_dict(dict(tensors))
    except (ValueError, KeyError, IndexError, RuntimeError, AttributeError, AssertionError) as err:
        said = (str(err).splitlines() or [type(err).__name__])[0][:200]
        return {**no_reader, "reason": f"{rules} refuses the file ({said}): no reader for it"}
    converted = out[0] if isinstance(out, tuple) else out
    prefix = denoiser_prefix(family) + "."
    layers: dict[str, dict[str, torch.Tensor]] = {}
    unknown = []
    for key, value in converted.items():
        module, _, part = key.removeprefix(prefix).rpartition(".")
        if not key.startswith(prefix) or part not in _LOKR or module not in module_shapes:
            unknown.append(key)
            continue
        layers.setdefault(module, {})[part] = value
    if not layers:
        return no_reader
    mismatched = []
    for module, factors in layers.items():
        shape = _kron_shape(factors)
        if shape is None or shape != tuple(module_shapes[module][:2]):
            mismatched.append(
                f"{prefix}{module}: {sorted(factors)} -> {shape} vs layer {module_shapes[module]}"
            )
    return {
        "checked": True,
        "ok": not (unknown or mismatched),
        "rules": rules,
        "loaded": len(layers),
        "dropped": [],
        "unknown": sorted(unknown)[:20],
        "mismatched": mismatched[:20],
    }


def _check_text_encoder(
    converted: Mapping[str, torch.Tensor], encoder: str, shapes: Mapping[str, Shape]
) -> tuple[int, list[str], list[str]]:
    """(layers' tensors loaded, unknown keys, shape mismatches) of diffusers' `encoder.` keys
    against that text encoder's {module: weight shape}, after the normalisation diffusers'
    text-encoder loader applies (lora_base._load_lora_into_text_encoder)."""
    from diffusers.utils import convert_state_dict_to_diffusers, convert_state_dict_to_peft

    part = {k.removeprefix(encoder + "."): v for k, v in converted.items() if k.startswith(encoder + ".")}
    if not part:
        return 0, [], []
    try:
        part = convert_state_dict_to_peft(convert_state_dict_to_diffusers(part))
    except ValueError as err:  # e.g. kohya CLIP keys without any out_proj: its type is not inferred
        return 0, [f"{encoder}: diffusers' text-encoder loader refuses these keys ({err})"], []
    targets = {file_module(m): s for m, s in shapes.items()}
    loaded, unknown, mismatched = 0, [], []
    for name, value in part.items():
        suffix = next((s for s in (_A, _B) if name.endswith(s)), None)
        module = file_module(name.removesuffix(suffix)) if suffix else name
        if suffix is None or module not in targets:
            unknown.append(f"{encoder}.{name}")
            continue
        target = targets[module]
        dim, want = (1, target[1]) if suffix == _A else (0, target[0])
        if value.shape[dim] != want:
            mismatched.append(f"{encoder}.{name}: {tuple(value.shape)} vs layer {target}")
        loaded += 1
    return loaded, unknown, mismatched
