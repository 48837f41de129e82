"""SDXL text-encoder LoRA tensors in the file layouts (pure `dict -> dict` functions), and
ComfyUI's key map for them.

Input: the run's text-encoder LoRA in peft naming, "<encoder>.<module>.lora_A.weight" /
".lora_B.weight", encoder = text_encoder (CLIP-L) | text_encoder_2 (CLIP-G); the module names
are normalised to the `text_model.encoder.layers.N...` spelling every loader reads (transformers 5
flattens CLIPTextModel to `encoder.layers.N...`; diffusers strips `text_model.` again on load).

- diffusers: "text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight", alpha /
  rank folded into lora_B (ComfyUI reads no alpha from a diffusers file; the header then records
  alpha = rank for each encoder, as for the denoiser: lora.convert.fold_strength);
- kohya / A1111 / ComfyUI: "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight"
  / ".lora_up.weight" / ".alpha" (lora_te2_ for CLIP-G).

ComfyUI (comfy/lora.py `model_lora_keys_clip`, the commit named in lora/comfy.py): for each CLIP
layer b < 32 and projection c in {mlp.fc1, mlp.fc2, self_attn.q/k/v/out_proj}, CLIP-L answers to
"lora_te_text_model_encoder_layers_{b}_{c_}", "lora_te1_..." and "text_encoder.text_model.encoder.
layers.{b}.{c}", CLIP-G (with CLIP-L present, as in SDXL) to "lora_te2_..." and "text_encoder_2.
text_model.encoder.layers.{b}.{c}".
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

ENCODER_PREFIXES: dict[str, str] = {"text_encoder": "lora_te1_", "text_encoder_2": "lora_te2_"}
_A, _B = ".lora_A.weight", ".lora_B.weight"
_CLIP_LAYER = re.compile(r"text_model\.encoder\.layers\.(\d+)\.(mlp\.fc[12]|self_attn\.(q|k|v|out)_proj)")
Shape = tuple[int, ...]


def file_module(module: str) -> str:
    """A CLIP module name in the `text_model.`-prefixed spelling of the files."""
    return module if module.startswith("text_model.") else "text_model." + module


def split_encoder(key: str) -> tuple[str, str]:
    """("text_encoder" | "text_encoder_2", the rest) of a "<encoder>.<rest>" key. Raises
    ValueError for another prefix."""
    encoder, _, rest = key.partition(".")
    if encoder not in ENCODER_PREFIXES or not rest:
        raise ValueError(f"not a text-encoder LoRA key: {key!r}")
    return encoder, rest


def clip_module(layer: str) -> tuple[str, str]:
    """(encoder, file module) of a "<encoder>.<module>" text-encoder layer whose module is one of
    CLIP's (`text_model.encoder.layers.N.` + a projection: the only text-encoder names both
    layouts and every loader share). Raises ValueError naming any other layer (a Qwen2.5-VL /
    T5 layer would be renamed into names no loader reads)."""
    encoder, rest = split_encoder(layer)
    module = file_module(rest)
    if not _CLIP_LAYER.fullmatch(module):
        raise ValueError(
            f"{layer!r} is not a CLIP text-encoder layer (text_model.encoder.layers.N.self_attn.q/k/v/"
            "out_proj, mlp.fc1 / fc2): only those have names in both layouts"
        )
    return encoder, module


def _modules(tensors: Mapping[str, torch.Tensor]) -> dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]]:
    """{(encoder, file module): (A [r, in], B [out, r])} of a peft-named text-encoder LoRA.
    Raises ValueError for a layer that is not CLIP's (clip_module)."""
    out = {}
    for key, a in tensors.items():
        if key.endswith(_A):
            out[clip_module(key.removesuffix(_A))] = (a, tensors[key.removesuffix(_A) + _B])
    return out


def to_diffusers_tensors(
    tensors: Mapping[str, torch.Tensor], rank: int, alpha: float
) -> dict[str, torch.Tensor]:
    """The diffusers keys of a text-encoder LoRA (peft naming in, see the module docstring), with
    alpha / rank folded into each lora_B."""
    scale = alpha / rank
    out = {}
    for (encoder, module), (a, b) in _modules(tensors).items():
        out[f"{encoder}.{module}{_A}"] = a
        out[f"{encoder}.{module}{_B}"] = b * scale if scale != 1 else b
    return out


def to_kohya_tensors(tensors: Mapping[str, torch.Tensor], alpha: float | None) -> dict[str, torch.Tensor]:
    """The kohya keys (lora_te1_ / lora_te2_, lora_down / lora_up / alpha) of a text-encoder LoRA;
    alpha None: each module's rank (a LoRA whose strength is folded into lora_B)."""
    out = {}
    for (encoder, module), (a, b) in _modules(tensors).items():
        name = ENCODER_PREFIXES[encoder] + module.replace(".", "_")
        out[name + ".lora_down.weight"] = a
        out[name + ".lora_up.weight"] = b
        out[name + ".alpha"] = torch.tensor(float(a.shape[0] if alpha is None else alpha))
    return out


def clip_key_map(clip_shapes: Mapping[str, Mapping[str, Shape]]) -> dict[str, Shape]:
    """ComfyUI's key map of SDXL's text encoders (module docstring): {LoRA name: weight shape},
    from {encoder: {module name: weight shape}} (any spelling of the module names)."""
    key_map: dict[str, Shape] = {}
    for encoder, shapes in clip_shapes.items():
        for module, shape in shapes.items():
            name = file_module(module)
            match = _CLIP_LAYER.fullmatch(name)
            if match is None or int(match.group(1)) >= 32:
                continue
            flat = name.replace(".", "_")
            if encoder == "text_encoder":
                key_map.update(
                    {"lora_te_" + flat: shape, "lora_te1_" + flat: shape, "text_encoder." + name: shape}
                )
            elif encoder == "text_encoder_2":
                key_map.update({"lora_te2_" + flat: shape, "text_encoder_2." + name: shape})
    return key_map


def file_clip_shapes(clip_shapes: Mapping[str, Mapping[str, Shape]]) -> dict[str, dict[str, Shape]]:
    """{encoder: {file module name: shape}} (names in the files' `text_model.` spelling)."""
    return {
        encoder: {file_module(m): s for m, s in shapes.items()} for encoder, shapes in clip_shapes.items()
    }


def with_adapter_metadata(
    header: Mapping[str, str], config: Mapping[str, object], rank: int, metadata_key: str
) -> dict[str, str]:
    """`header` with each text encoder's peft LoraConfig (`config`, a LoraConfig dict) added to
    diffusers' adapter metadata (`metadata_key`, JSON keyed "<component>.<field>"), with
    lora_alpha = rank: the diffusers file holds alpha / rank folded into lora_B."""
    import json

    packed = json.loads(header.get(metadata_key, "{}"))
    own = {**config, "r": rank, "lora_alpha": float(rank), "rank_pattern": {}, "alpha_pattern": {}}
    for encoder in ENCODER_PREFIXES:
        packed.update({f"{encoder}.{k}": v for k, v in own.items()})
    return {**header, metadata_key: json.dumps(packed, indent=2, sort_keys=True)}


_KOHYA_MODULE = re.compile(r"text_model_encoder_layers_(\d+)_(self_attn_(?:q|k|v|out)_proj|mlp_fc[12])")
_DOTTED = {  # kohya's flat projection names (ComfyUI's LORA_CLIP_MAP, reversed)
    **{f"self_attn_{p}_proj": f"self_attn.{p}_proj" for p in ("q", "k", "v", "out")},
    "mlp_fc1": "mlp.fc1",
    "mlp_fc2": "mlp.fc2",
}


def split_text_encoders(
    tensors: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the denoiser's tensors, the text encoders') of a LoRA file in either layout."""
    te_prefixes = (*ENCODER_PREFIXES.values(), *(f"{e}." for e in ENCODER_PREFIXES))
    denoiser = {k: v for k, v in tensors.items() if not k.startswith(te_prefixes)}
    return denoiser, {k: v for k, v in tensors.items() if k.startswith(te_prefixes)}


def folded_peft(
    tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None
) -> dict[str, torch.Tensor]:
    """The text encoders' part of a file (either layout) in peft naming with each module's
    alpha / rank folded into its lora_B. kohya keys: each module's `.alpha` (none: alpha = rank).
    diffusers keys: the file's header `metadata` (diffusers' adapter metadata, per encoder
    "<encoder>.r" / ".lora_alpha" / ".rank_pattern" / ".alpha_pattern", as diffusers' own
    save_lora_weights writes them and its loader applies them); an encoder it does not describe
    (or no `metadata`) is at alpha = rank, diffusers' rule and what this studio's files hold.
    Raises ValueError naming a key of neither layout, ModelSourceError for a module whose rank
    contradicts the adapter config."""
    out: dict[str, torch.Tensor] = {}
    encoders = {prefix: encoder for encoder, prefix in ENCODER_PREFIXES.items()}
    for key, value in tensors.items():
        prefix = next((p for p in encoders if key.startswith(p)), None)
        if prefix is None:  # diffusers: "<encoder>.text_model....lora_A.weight"
            if not key.endswith((_A, _B)):
                raise ValueError(f"not a text-encoder LoRA key: {key!r}")
            clip_module(key.removesuffix(_A).removesuffix(_B))
            out[key] = value
            continue
        name, _, suffix = key[len(prefix) :].partition(".")
        match = _KOHYA_MODULE.fullmatch(name)
        if match is None or suffix not in ("lora_down.weight", "lora_up.weight", "alpha"):
            raise ValueError(f"not a text-encoder LoRA key: {key!r}")
        if suffix == "alpha":
            continue
        module = f"{encoders[prefix]}.text_model.encoder.layers.{match.group(1)}.{_DOTTED[match.group(2)]}"
        if suffix == "lora_down.weight":
            out[module + _A] = value
        else:
            down = tensors[key.replace("lora_up.weight", "lora_down.weight")]
            alpha = tensors.get(key.replace("lora_up.weight", "alpha"))
            scale = float(alpha) / down.shape[0] if alpha is not None else 1.0
            out[module + _B] = value * scale if scale != 1 else value
    return _with_diffusers_scales(out, tensors, metadata)


def _with_diffusers_scales(
    out: dict[str, torch.Tensor], tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None
) -> dict[str, torch.Tensor]:
    """`out` with the scale of each diffusers-layout encoder's adapter config (folded_peft)
    folded into the lora_B of that encoder's modules (the keys `tensors` held in diffusers names)."""
    import json

    from lorastudio.lora.convert import pattern_scales

    packed = json.loads((metadata or {}).get("lora_adapter_metadata", "{}"))
    for encoder in ENCODER_PREFIXES:
        if f"{encoder}.r" not in packed:
            continue
        own = f"{encoder}."
        modules = {
            k.removeprefix(own).removesuffix(_A): (v, tensors[k.removesuffix(_A) + _B])
            for k, v in tensors.items()
            if k.startswith(own) and k.endswith(_A)
        }
        rank = int(packed[own + "r"])
        alpha = float(packed.get(own + "lora_alpha", rank))
        scales = pattern_scales(
            modules,
            rank,
            alpha,
            dict(packed.get(own + "rank_pattern") or {}),
            dict(packed.get(own + "alpha_pattern") or {}),
        )
        for module, scale in scales.items():
            if scale != 1.0:
                out[own + module + _B] = out[own + module + _B] * scale
    return out
