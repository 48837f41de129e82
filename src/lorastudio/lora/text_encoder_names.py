"""Text-encoder layers of LoRA files from any trainer: which layouts exist, which are read here,
and the module each key names, resolved against transformers' own encoder classes built on the
meta device (lora/onetrainer_names.py's matching: never re-dotted by a rule).

Layouts that exist (a layer = `<name>.lora_down.weight` / `.lora_up.weight` / `.alpha`, or peft's
`.lora_A.weight` / `.lora_B.weight`):
- kohya sd-scripts / A1111 / ComfyUI (comfy/lora.py `model_lora_keys_clip`): `lora_te_` or
  `lora_te1_` + CLIP-L's module name with "_" for "." (`lora_te1_text_model_encoder_layers_0_
  self_attn_q_proj`), `lora_te2_` + CLIP-G's (SDXL): layers b < 32, q/k/v/out_proj, mlp.fc1/fc2.
  ComfyUI also maps T5 (`t5xxl`) beside CLIP-L and no CLIP-G, FLUX.1's pair, as `lora_te2_` + T5's
  module name (its "OneTrainer Flux" entry; `lora_te3_` with CLIP-G too, SD3; `lora_te1_` where
  T5 is the model's only encoder, as in ComfyUI's Chroma and PixArt),
  `lora_te1_text_projection` / `lora_te2_text_projection` (OneTrainer's CLIP projections), for a
  model of one Llama-like encoder `lora_te_` + its `model.`-less name (kohya's Anima), and
  `text_encoders.<ComfyUI's own weight name>` (its generic spelling).
- OneTrainer (modules/util/convert/lora: its "legacy diffusers" layout, what LoRASaverMixin
  writes unless the opt-in OMI format is on): every Linear of a trained encoder under its
  LoRAModuleWrapper prefix, "_" for ".": SDXL `lora_te1_` (CLIP-L) and `lora_te2_` (CLIP-G, its
  `text_projection` included); FLUX.1 `lora_te1_` (CLIP-L) and `lora_te2_` (T5:
  `encoder_block_N_layer_0_SelfAttention_q|k|v|o`, `encoder_block_N_layer_1_DenseReluDense_
  wi_0|wi_1|wo`); Chroma `lora_te_` + T5's names (ComfyUI v0.19.3 maps none of them:
  bench/comfyui_te_check.py); Qwen-Image, Z-Image and the other one-encoder models `lora_te_` +
  the LLM's names. The OMI layout (`clip_l.`, `clip_g.`, `t5.` + dotted names) is not read (refused as a
  key of no layout, by lora/files.detect_layout).
- diffusers: its own files `text_encoder.<module>` / `text_encoder_2.<module>` + lora_A / lora_B;
  it converts SDXL's `lora_te_` / `lora_te1_` / `lora_te2_` (`_convert_non_diffusers_lora_to_
  diffusers`, text_projection too) and FLUX.1's `lora_te1_` CLIP-L only
  (`_convert_kohya_flux_lora_to_diffusers`: a `lora_te2_` T5 key is dropped with a warning from an
  sd-scripts file and fails an assertion in a OneTrainer `lora_transformer_` file), and its
  FluxPipeline loads LoRAs into the transformer and CLIP-L only.

Read here (convert, merge, resize, generation), per family, ENCODERS: SDXL `text_encoder` =
CLIP-L, `text_encoder_2` = CLIP-G (with its text_projection); FLUX.1 and FLUX.1 Kontext (the
same encoders) `text_encoder` = CLIP-L, `text_encoder_2` = T5; Chroma `text_encoder` = T5 (FLUX.1's
T5 alone: `lora_te_` (OneTrainer's Chroma wrapper) and `lora_te1_` (ComfyUI's Chroma name) read, `lora_te1_` written);
in the kohya / OneTrainer
spelling (`lora_te_` and `lora_te1_` name text_encoder, `lora_te2_` text_encoder_2) and the
diffusers one. Written: kohya `lora_te1_` / `lora_te2_` (what ComfyUI reads, for T5 too);
diffusers `text_encoder.` / `text_encoder_2.`, except FLUX.1's T5, which no diffusers loader
and no ComfyUI map reads under that name, and Chroma's T5, which ComfyUI reads under no such name
(lora/text_encoder_files.with_text_encoders refuses both; generation merges T5's layers itself).
Refused, naming the key and the reason (refusal): every other family's text-encoder keys
(Qwen-Image's Qwen2.5-VL, Z-Image's Qwen3, ...): their pipelines load LoRAs into the
denoiser only, and convert would write names no loader reads; nothing is dropped silently.

Contract: `resolve(name, family)` answers (component, module) for a layer name (a key without
its lora_down / lora_A ... suffix) of either spelling; module in the files' spelling (CLIP's
`text_model.` prefix, `text_projection` beside it; T5's own names). ValueError naming the key
and the reason for any other (a family that takes none, a prefix of no encoder, a name of no
layer of that encoder). A block list's index stands for any index (a real encoder has more
layers than the tiny config built here); ASCII digits without a leading zero.
"""

from __future__ import annotations

import functools
import re

import torch

from lorastudio.lora import onetrainer_names

# family -> {component: the encoder class it is}
ENCODERS: dict[str, dict[str, str]] = {
    "sdxl": {"text_encoder": "CLIPTextModel", "text_encoder_2": "CLIPTextModelWithProjection"},
    "flux": {"text_encoder": "CLIPTextModel", "text_encoder_2": "T5EncoderModel"},
    "flux-kontext": {"text_encoder": "CLIPTextModel", "text_encoder_2": "T5EncoderModel"},
    # FLUX.1's T5 alone (ChromaPipeline's text_encoder): ComfyUI's Chroma CLIP is `t5xxl` alone,
    # which model_lora_keys_clip maps as `lora_te1_` + T5's name; OneTrainer writes `lora_te_`
    "chroma": {"text_encoder": "T5EncoderModel"},
}
# component -> the kohya prefix written
KOHYA_PREFIX: dict[str, str] = {"text_encoder": "lora_te1_", "text_encoder_2": "lora_te2_"}
_READ_PREFIX = {"lora_te_": "text_encoder", "lora_te1_": "text_encoder", "lora_te2_": "text_encoder_2"}
# (family, component) the pipeline's own load_lora_weights never loads: generation merges them
# (generate/foreign_loras.py), and no diffusers-layout name of them is read by any loader
NOT_DIFFUSERS: frozenset[tuple[str, str]] = frozenset(
    {("flux", "text_encoder_2"), ("flux-kontext", "text_encoder_2"), ("chroma", "text_encoder")}
)
# the text encoder of each family that takes no text-encoder LoRA here
_OTHER_ENCODERS = {
    "qwen-image": "Qwen2.5-VL",
    "qwen-image-edit": "Qwen2.5-VL",
    "z-image": "Qwen3",
    "flux2": "Mistral Small 3.1",
    "flux2-klein": "Qwen3",
}
# any text-encoder key: kohya / OneTrainer / ComfyUI prefixes, diffusers' components
_TE_KEY = re.compile(r"^(lora_te\d*_|lora_te\d*\.|text_encoders?(_\d+)?\.)")
_CLIP = ("CLIPTextModel", "CLIPTextModelWithProjection")


def is_text_encoder_key(key: str) -> bool:
    """Whether `key` is a text encoder's in any layout (module docstring), read here or not."""
    return _TE_KEY.match(key) is not None


def component_of(key: str) -> str:
    """The component a text-encoder key's prefix names (`lora_te_` / `lora_te1_`: text_encoder,
    `lora_te2_`: text_encoder_2, `<component>.`: itself), its name not checked (resolve does)."""
    prefix = next((p for p in _READ_PREFIX if key.startswith(p)), None)
    return _READ_PREFIX[prefix] if prefix is not None else key.partition(".")[0]


def refusal(family: str) -> str | None:
    """Why `family`'s text-encoder LoRA layers are refused, or None when they are read."""
    if family in ENCODERS:
        return None
    encoder = _OTHER_ENCODERS.get(family)
    which = f"its text encoder ({encoder})" if encoder else "its text encoder"
    return (
        f"{family} takes no text-encoder LoRA here: {which} is not patched by its pipeline's LoRA loader"
        " (diffusers loads a LoRA into the denoiser only) nor by lorastudio, which reads text-encoder"
        " layers of SDXL (CLIP-L, CLIP-G), FLUX.1 (CLIP-L, T5) and Chroma (T5) only; remove them from the file"
        " (or use the trainer's option to save the denoiser's layers alone)"
    )


def file_module(module: str, encoder_class: str) -> str:
    """A module name of `encoder_class` in the files' spelling: CLIP's under `text_model.` (the
    `text_projection` beside it; transformers 5 flattens CLIPTextModel to `encoder.layers.N`)."""
    if encoder_class in _CLIP and not module.startswith(("text_model.", "text_projection")):
        return "text_model." + module
    return module


def _build(encoder_class: str) -> torch.nn.Module:
    """A 2-layer model of the class, on the meta device (its module names only)."""
    from transformers import (
        CLIPTextConfig,
        CLIPTextModel,
        CLIPTextModelWithProjection,
        T5Config,
        T5EncoderModel,
    )

    with torch.device("meta"):
        if encoder_class == "T5EncoderModel":  # FLUX.1's T5 v1.1: gated feed-forward (wi_0, wi_1)
            config = T5Config(
                d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"
            )
            return T5EncoderModel(config)
        clip = CLIPTextConfig(
            hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2
        )
        return (CLIPTextModel if encoder_class == "CLIPTextModel" else CLIPTextModelWithProjection)(clip)


@functools.cache
def templates(encoder_class: str) -> tuple[onetrainer_names.Template, ...]:
    """The LoRA-able module names of `encoder_class` in the files' spelling (any block index)."""
    model = _build(encoder_class)
    return onetrainer_names.templates_of(model, functools.partial(file_module, encoder_class=encoder_class))


def resolve(name: str, family: str) -> tuple[str, str]:
    """(component, module) of the text-encoder layer `name` of a `family` file (module docstring).
    Raises ValueError naming `name` and the reason."""
    why = refusal(family)
    if why is not None:
        raise ValueError(f"text-encoder layer {name!r}: {why}")
    encoders = ENCODERS[family]
    prefix = next((p for p in _READ_PREFIX if name.startswith(p)), None)
    if prefix is not None:
        component, rest = _READ_PREFIX[prefix], name[len(prefix) :]
        if component not in encoders:  # Chroma's one encoder: lora_te2_ names none
            known = ", ".join(p for p, c in _READ_PREFIX.items() if c in encoders)
            raise ValueError(
                f"text-encoder layer {name!r}: {family} has one text encoder ({encoders['text_encoder']}),"
                f" read under {known}; {prefix} names a second one"
            )
        found = onetrainer_names.match_flat(rest, templates(encoders[component]))
        if len(found) == 1:
            return component, found.pop()
        detail = "names no layer" if not found else f"could name several layers ({', '.join(sorted(found))})"
    else:
        component, _, rest = name.partition(".")
        if component not in encoders:
            known = ", ".join([*_READ_PREFIX, *(f"{c}." for c in encoders)])
            raise ValueError(
                f"text-encoder layer {name!r}: no {family} text encoder has this prefix (read: {known})"
            )
        module = file_module(rest, encoders[component])
        if onetrainer_names.match_dotted(module, templates(encoders[component])):
            return component, module
        detail = "names no layer"
    raise ValueError(
        f"text-encoder layer {name!r} {detail} of {family}'s {component} ({encoders[component]})"
    )
