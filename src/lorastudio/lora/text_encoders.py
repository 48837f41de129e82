"""Text-encoder LoRA tensors in the file layouts (pure `dict -> dict` functions), and ComfyUI's
key map for SDXL's. The families and encoders read, and the layouts other trainers write
(kohya, OneTrainer, ComfyUI, diffusers): lora/text_encoder_names.py, which resolves every name
here against the encoder's real module names (SDXL: CLIP-L, CLIP-G with its text_projection;
FLUX.1: CLIP-L, T5 as `text_encoder_2`, `lora_te2_encoder_block_N_...`; Chroma: T5 alone as
`text_encoder`, `lora_te1_encoder_block_N_...`). ComfyUI's own loader maps every kohya key written
here onto its weight at the file's change: bench/comfyui_te_check.py.

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
text_model.encoder.layers.{b}.{c}"; an encoder's text_projection to "lora_te1_text_projection" /
"lora_te2_text_projection" (OneTrainer's names).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch

from lorastudio import json_read
from lorastudio.lora import text_encoder_names

ENCODER_PREFIXES: dict[str, str] = {"text_encoder": "lora_te1_", "text_encoder_2": "lora_te2_"}
_A, _B = ".lora_A.weight", ".lora_B.weight"
_CLIP_LAYER = re.compile(r"text_model\.encoder\.layers\.(\d+)\.(mlp\.fc[12]|self_attn\.(q|k|v|out)_proj)")
Shape = tuple[int, ...]


def file_module(module: str) -> str:
    """A CLIP module name in the `text_model.`-prefixed spelling of the files."""
    return module if module.startswith("text_model.") else "text_model." + module


def _modules(
    tensors: Mapping[str, torch.Tensor], family: str = "sdxl"
) -> dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]]:
    """{(encoder, file module): (A [r, in], B [out, r])} of a peft-named text-encoder LoRA of
    `family`. Raises ValueError for a layer of no encoder of it (text_encoder_names.resolve)."""
    out = {}
    for key, a in tensors.items():
        if key.endswith(_A):
            out[text_encoder_names.resolve(key.removesuffix(_A), family)] = (
                a,
                tensors[key.removesuffix(_A) + _B],
            )
    return out


def to_diffusers_tensors(
    tensors: Mapping[str, torch.Tensor], rank: int, alpha: float, family: str = "sdxl"
) -> dict[str, torch.Tensor]:
    """The diffusers keys of a text-encoder LoRA (peft naming in, see the module docstring), with
    alpha / rank folded into each lora_B."""
    scale = alpha / rank
    out = {}
    for (encoder, module), (a, b) in _modules(tensors, family).items():
        out[f"{encoder}.{module}{_A}"] = a
        out[f"{encoder}.{module}{_B}"] = b * scale if scale != 1 else b
    return out


def to_kohya_tensors(
    tensors: Mapping[str, torch.Tensor], alpha: float | None, family: str = "sdxl"
) -> dict[str, torch.Tensor]:
    """The kohya keys (lora_te1_ / lora_te2_, lora_down / lora_up / alpha) of a text-encoder LoRA;
    alpha None: each module's rank (a LoRA whose strength is folded into lora_B)."""
    out = {}
    for (encoder, module), (a, b) in _modules(tensors, family).items():
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
            if module == "text_projection" and encoder in ENCODER_PREFIXES:  # OneTrainer's (ComfyUI maps it)
                key_map[ENCODER_PREFIXES[encoder] + "text_projection"] = shape
                continue
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
    header: Mapping[str, str],
    config: Mapping[str, object],
    rank: int,
    metadata_key: str,
    encoders: Sequence[str] = tuple(ENCODER_PREFIXES),
) -> dict[str, str]:
    """`header` with each text encoder's peft LoraConfig (`config`, a LoraConfig dict) added to
    diffusers' adapter metadata (`metadata_key`, JSON keyed "<component>.<field>") of each of
    `encoders`, with lora_alpha = rank: the diffusers file holds alpha / rank folded into lora_B."""
    import json

    packed = json_read.loads(header.get(metadata_key, "{}"))
    own = {**config, "r": rank, "lora_alpha": float(rank), "rank_pattern": {}, "alpha_pattern": {}}
    for encoder in encoders:
        packed.update({f"{encoder}.{k}": v for k, v in own.items()})
    return {**header, metadata_key: json.dumps(packed, indent=2, sort_keys=True)}


_KOHYA_PARTS = ("lora_down.weight", "lora_up.weight", "alpha")


def split_text_encoders(
    tensors: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the denoiser's tensors, the text encoders') of a LoRA file in either layout: every key
    of a text-encoder prefix of any trainer (text_encoder_names.is_text_encoder_key), read or not,
    goes to the second (where folded_peft reads or refuses it, naming it)."""
    te = text_encoder_names.is_text_encoder_key
    return {k: v for k, v in tensors.items() if not te(k)}, {k: v for k, v in tensors.items() if te(k)}


def folded_peft(
    tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None, family: str = "sdxl"
) -> dict[str, torch.Tensor]:
    """The text encoders' part of a `family` file (either layout; kohya's and OneTrainer's
    `lora_te_` / `lora_te1_` / `lora_te2_` names) in peft naming ("<encoder>.<file module>.lora_A.
    weight") with each module's alpha / rank folded into its lora_B, every name resolved against
    the family's encoders (text_encoder_names.resolve). kohya keys: each module's `.alpha` (none:
    alpha = rank). diffusers keys: the file's header `metadata` (diffusers' adapter metadata, per
    encoder "<encoder>.r" / ".lora_alpha" / ".rank_pattern" / ".alpha_pattern", as diffusers' own
    save_lora_weights writes them and its loader applies them); an encoder it does not describe
    (or no `metadata`) is at alpha = rank, diffusers' rule and what this studio's files hold.
    Raises ValueError naming a key of neither layout, of no layer of the family's encoders, or of
    a family that takes none (with the reason); ModelSourceError for a module whose rank
    contradicts the adapter config."""
    out: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        if key.endswith((_A, _B)) and not key.startswith(
            "lora_te"
        ):  # diffusers: "<encoder>.<module>.lora_A.weight"
            encoder, module = text_encoder_names.resolve(key.removesuffix(_A).removesuffix(_B), family)
            out[f"{encoder}.{module}{key[-len(_A) :]}"] = value
            continue
        name, _, suffix = key.partition(".")
        if suffix not in _KOHYA_PARTS:
            raise ValueError(f"not a text-encoder LoRA key: {key!r}")
        encoder, module = text_encoder_names.resolve(name, family)
        if suffix == "alpha":
            continue
        if suffix == "lora_down.weight":
            out[f"{encoder}.{module}{_A}"] = value
            continue
        down = tensors.get(f"{name}.lora_down.weight")
        if down is None:
            raise ValueError(f"text-encoder layer {name!r} has no lora_down.weight")
        alpha = tensors.get(f"{name}.alpha")
        scale = float(alpha) / down.shape[0] if alpha is not None else 1.0
        out[f"{encoder}.{module}{_B}"] = value * scale if scale != 1 else value
    downs = {k.removesuffix(_A) for k in out if k.endswith(_A)}
    broken = sorted(downs ^ {k.removesuffix(_B) for k in out if k.endswith(_B)})
    if broken:
        raise ValueError(
            f"text-encoder layers missing lora_down / lora_A or lora_up / lora_B: {', '.join(broken)}"
        )
    return _with_diffusers_scales(out, tensors, metadata, family)


def _with_diffusers_scales(
    out: dict[str, torch.Tensor],
    tensors: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None,
    family: str,
) -> dict[str, torch.Tensor]:
    """`out` with the scale of each diffusers-layout encoder's adapter config (folded_peft)
    folded into the lora_B of that encoder's modules (the keys `tensors` held in diffusers names)."""

    from lorastudio.lora.convert import pattern_scales

    packed = json_read.loads((metadata or {}).get("lora_adapter_metadata", "{}"))
    for encoder in text_encoder_names.ENCODERS.get(family, {}):
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
            packed.get(own + "use_rslora") is True,
        )
        for module, scale in scales.items():
            if scale != 1.0:  # the file's module name, in out under its files' spelling
                key = "{}.{}{}".format(*text_encoder_names.resolve(own + module, family), _B)
                out[key] = out[key] * scale
    return out
