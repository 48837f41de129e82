"""LoRA files the pipeline's own `load_lora_weights` cannot read (or would read in part) but
lorastudio's readers do:
- OneTrainer's Qwen-Image, Z-Image and FLUX.1 files (`lora_transformer_<diffusers name, "_" for
  ".">` with lora_down / lora_up / .alpha: diffusers' Qwen-Image and Z-Image loaders take them
  for unknown modules; its FLUX.1 reader names attention layers only, and fails on a single
  block's proj_out / proj_mlp / norm or a double block's MLP).
- FLUX.1 files with T5 layers (OneTrainer's `lora_te2_encoder_block_N_…`, which ComfyUI reads as
  T5's), and Chroma files with its one encoder's, T5's (`lora_te_` / `lora_te1_`: merged the same
  way; diffusers' kohya reader would take `lora_te1_` for CLIP-L's): diffusers' FluxPipeline loads a LoRA into the transformer and CLIP-L only (its converter
  drops `lora_te2_` keys of an sd-scripts file with a warning and fails an assertion on those of
  a OneTrainer file). The transformer and CLIP-L layers are loaded as the diffusers state dict
  lorastudio's readers give; the T5 layers are merged into T5's weights at the strength, as
  ComfyUI patches them (W + strength * (alpha / rank) * up @ down), and restored exactly by the
  next apply_loras (generate/lycoris_patch.restore_lycoris keeps the originals).
- FLUX.1 / Kontext / Chroma files in ComfyUI's generic spelling with peft's matrices
  (`diffusion_model.<BFL name>.lora_A / lora_B`: ai-toolkit's Chroma files, whose layers include
  the approximator's): diffusers' FLUX.1 reader converts none of it ("no layer matching").
- kohya FLUX.1 / Kontext / Chroma files with a layer diffusers' kohya converter does not map
  (Chroma's approximator, `lora_unet_distilled_guidance_layer_…`, which ComfyUI maps): it
  refuses them ("Incompatible keys detected").
- FLUX.2 / klein files in kohya's or ComfyUI's generic spelling (`lora_unet_<BFL name>`,
  `diffusion_model.<BFL name>`: musubi-tuner's, ai-toolkit's): diffusers' kohya FLUX.2 converter
  drops what it does not map (the modulations, guidance_in, the final adaLN: a logged warning),
  its `diffusion_model.` one loads the final adaLN's LoRA with its (shift, scale) halves unswapped.
- Diffusers-named files with a per-layer `.alpha` (`transformer.<module>.alpha` beside its
  lora_A / lora_B): diffusers' FLUX.1 reader takes them, its SDXL, Qwen-Image, Z-Image, FLUX.2 and
  Krea 2 readers fail on them; read with each alpha / rank folded into its lora_B
  (lora/file_read.fold_layer_alphas), as ComfyUI applies them.
- SDXL kohya files whose layers differ in `.alpha` (kohya's dynamic resize): diffusers' SDXL
  loader applies the most common alpha to every layer; read with each layer's alpha / rank
  folded into its lora_B, as ComfyUI applies them.
- Files of text-encoder layers alone (kohya's `--network_train_text_encoder_only`), and SDXL
  files whose kohya CLIP layers are q / k / v projections only: diffusers' SDXL loader fails on
  them ("Could not automatically infer state dict type").
- ai-toolkit's DoRA files (`transformer.<module>.magnitude` beside lora_A / lora_B): diffusers'
  loader drops the magnitudes (the DoRA rendered as its plain LoRA); read with them renamed to
  peft's `lora_magnitude_vector` (generate/diffusers_keys.py). Any other diffusers-named tensor
  that loader would drop is refused, naming it.
- Text-encoder layers of a family that takes none (Qwen-Image's Qwen2.5-VL, ...:
  lora/text_encoder_names.refusal): refused naming the key and the reason; diffusers' loaders
  would drop them or fail on them.

Contract: `read_foreign(path, pipe)` answers None for a file the pipeline's loader reads as it
is, else a ForeignLora: `state`, the diffusers state dict to load in place of the file
(`transformer.<module>.lora_A / lora_B`, `text_encoder.<module>...`, each layer's alpha / rank
folded into its lora_B: `load_lora_weights(state_dict)` with no adapter config then applies
scale 1 in every layer, and set_adapters' strength scales it as for any other file; empty when
the file holds only merged layers), and `merged`, the layers to merge with `merge_layers`. Every
name is resolved against the family's real module names (lora/onetrainer_names.py,
lora/text_encoder_names.py). Raises ModelSourceError naming the file and the layer it cannot
read, and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lorastudio.errors import ConfigError, ModelSourceError

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

_ONETRAINER = "lora_transformer_"
_GENERIC = "diffusion_model."
# FluxPipeline's own reader of OneTrainer's names (lora_conversion_utils'
# `_convert_mixture_state_dict_to_diffusers`) names only attention layers: a single block's
# proj_out / proj_mlp / norm.linear or a double block's MLP comes out as the block itself
# (`single_transformer_blocks.0.lora_A.weight`) and the load fails (KeyError)
_FLUX = ("flux", "flux-kontext")
_FLUX2 = ("flux2", "flux2-klein")  # kohya layouts (lora.names.kohya_layout)
# the kohya FLUX.1 layers diffusers' converter maps (lora_conversion_utils'
# _convert_sd_scripts_to_ai_toolkit, diffusers 0.42.1); it refuses any other `lora_unet_` key
_DIFFUSERS_FLUX_KOHYA = re.compile(
    r"lora_unet_(double_blocks_\d+_(img|txt)_(attn_proj|attn_qkv|mlp_0|mlp_2|mod_lin)"
    r"|single_blocks_\d+_(linear1|linear2|modulation_lin)|(guidance_in|time_in|vector_in)_(in|out)_layer"
    r"|img_in|txt_in|final_layer_(linear|adaLN_modulation_1))\."
)
_A, _B = ".lora_A.weight", ".lora_B.weight"
# families whose diffusers loader (StableDiffusionXLLoraLoaderMixin: utils/peft_utils.get_peft_kwargs)
# gives every layer of a kohya file the most common `.alpha`: a file of per-layer alphas (kohya's
# resize_lora.py --dynamic_method, block-weighted merges) came out at the wrong strength in every
# layer of another alpha (diffusers 0.42.1), so such a file is read here
_ONE_ALPHA = ("sdxl",)


@dataclass(frozen=True)
class ForeignLora:
    """What generation loads of a file diffusers' loader cannot read as it is (module docstring):
    `state` for load_lora_weights; `merged` {"<component>.<module>": (A [r, in], B [out, r] with
    alpha / rank folded)} for merge_layers."""

    state: dict[str, torch.Tensor]
    merged: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


def family_of_pipeline(pipe: DiffusionPipeline) -> str | None:
    """The family whose pipeline class `pipe` is (its spec's pipeline_class or an accepted one)."""
    from lorastudio import families

    name = type(pipe).__name__
    for family in families.names():
        spec = families.get(family).spec
        if name == spec.pipeline_class or name in spec.accepted_pipelines:
            return family
    return None


def read_foreign(path: Path, pipe: DiffusionPipeline) -> ForeignLora | None:
    """The state dict to load in place of `path` and the layers to merge, or None (module
    docstring)."""
    from safetensors import SafetensorError, safe_open

    from lorastudio.generate.diffusers_keys import aitoolkit_magnitudes, peft_state, unread_keys
    from lorastudio.generate.lycoris_names import layout_of_pipeline
    from lorastudio.lora import onetrainer_names, text_encoder_names
    from lorastudio.lora.file_read import has_layer_alphas

    family = family_of_pipeline(pipe)
    layout = layout_of_pipeline(type(pipe).__name__)
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())  # noqa: SIM118
    except (OSError, SafetensorError):
        return None  # the loader names the problem
    dropped = unread_keys(keys)  # diffusers' loader would drop them, logging at most
    if dropped:
        raise ModelSourceError(
            f"cannot apply LoRA {path}: {dropped[0]!r}"
            + (f" (and {len(dropped) - 1} more)" if len(dropped) > 1 else "")
            + " is no tensor of a LoRA or DoRA layer that diffusers' loader reads: it would be left out"
        )
    encoders = [k for k in keys if text_encoder_names.is_text_encoder_key(k)]
    why = text_encoder_names.refusal(family) if family is not None else None
    if encoders and why is not None:
        raise ModelSourceError(f"cannot apply LoRA {path}: text-encoder layer {encoders[0]!r}: {why}")
    unread = {c for f, c in text_encoder_names.NOT_DIFFUSERS if f == family}
    merged = any(text_encoder_names.component_of(k) in unread for k in encoders)
    ours = layout in onetrainer_names.FAMILIES or family in _FLUX  # lora_transformer_ read here
    theirs = ours and any(k.startswith(_ONETRAINER) for k in keys)
    # ComfyUI's generic spelling with peft's matrices, `diffusion_model.<checkpoint name>.lora_A`
    # (ai-toolkit's Chroma files): FluxLoraLoaderMixin (FLUX.1, Kontext, Chroma) converts none of it
    theirs = theirs or (layout == "flux" and any(k.startswith(_GENERIC) and _A in k for k in keys))
    # a kohya FLUX.1 / Kontext / Chroma layer diffusers' kohya converter does not map (Chroma's
    # approximator, which ComfyUI maps): it refuses the file ("Incompatible keys detected")
    theirs = theirs or (
        layout == "flux"
        and any(k.startswith("lora_unet_") and not _DIFFUSERS_FLUX_KOHYA.match(k) for k in keys)
    )
    # FLUX.2's / klein's kohya and generic spellings: diffusers' kohya converter drops the layers it
    # does not map (the modulations, guidance_in, the final adaLN) with a logged warning, and its
    # `diffusion_model.` converter takes the final adaLN's (shift, scale) halves as diffusers'
    # (scale, shift), unswapped
    theirs = theirs or (layout in _FLUX2 and any(k.startswith((_GENERIC, "lora_unet_")) for k in keys))
    # diffusers' names with a per-layer .alpha: its readers of Qwen-Image, Z-Image, SDXL, FLUX.2
    # and Krea 2 fail on them (lora/file_read.fold_layer_alphas)
    # (a DoRA's magnitudes are diffusers' loader's to read: lorastudio's reader takes LoRA files)
    dora = any(k.endswith(".lora_magnitude_vector") for k in keys)
    theirs = theirs or (has_layer_alphas(keys) and not dora)
    # SDXL's kohya files whose layers differ in alpha: diffusers' SDXL loader applies the most
    # common alpha to every layer (its alpha_pattern matches no module)
    theirs = theirs or (family in _ONE_ALPHA and _alphas_differ(path, keys))
    # text-encoder layers alone, or kohya CLIP layers of q / k / v only: diffusers' SDXL loader
    # fails on them (its kohya text-encoder names tell its old format by to_out_lora /
    # lora_linear_layer, which only out_proj / mlp layers get: "Could not automatically infer
    # state dict type")
    theirs = (
        theirs or (bool(encoders) and len(encoders) == len(keys)) or _attention_only_clip(family, encoders)
    )
    if aitoolkit_magnitudes(keys):  # ai-toolkit's DoRA: its `.magnitude` is peft's magnitude
        if theirs or merged:
            raise ModelSourceError(
                f"cannot apply LoRA {path}: an ai-toolkit DoRA (its `.magnitude` tensors) with layers "
                "diffusers' loader does not read as they are (per-layer alphas, T5 or foreign names)"
            )
        return ForeignLora(peft_state(path))
    if not (theirs or merged):
        return None
    try:
        return _read(path, family or "", layout or "", unread)
    except ConfigError as err:  # the name tables' refusal, worded for a config's field: the reasons alone
        reasons = "; ".join(problem.message for problem in err.problems)
        raise ModelSourceError(
            f"cannot apply LoRA {path}: a layer of it is none of this model's: {reasons}"
        ) from err
    except (ModelSourceError, ValueError) as err:
        raise ModelSourceError(f"cannot apply LoRA {path}: {err}") from err


def _attention_only_clip(family: str | None, encoders: list[str]) -> bool:
    """Whether an SDXL file's kohya CLIP layers (`lora_te1_` / `lora_te2_`) are all of q / k / v
    projections (no out_proj, mlp or text_projection: read_foreign's comment)."""
    kohya = [k for k in encoders if k.startswith("lora_te")]
    return (
        family in _ONE_ALPHA
        and bool(kohya)
        and not any(w in k for k in kohya for w in ("out_proj", "_mlp_", "text_projection"))
    )


def _alphas_differ(path: Path, keys: list[str]) -> bool:
    """Whether the `.alpha` tensors of the file `path` (of these keys) hold more than one value."""
    from safetensors import SafetensorError, safe_open

    alphas = [k for k in keys if k.endswith(".alpha")]
    if len(alphas) < 2:
        return False
    try:
        with safe_open(str(path), framework="pt") as f:
            return len({float(f.get_tensor(k).float().reshape(-1)[0]) for k in alphas}) > 1
    except (OSError, SafetensorError, IndexError):
        return False  # the loader names the problem


def _read(path: Path, family: str, layout: str, unread: set[str]) -> ForeignLora:
    """read_foreign's reading of the file by lorastudio's readers (lora convert's)."""
    from lorastudio.lora.convert import fold_strength
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.files import denoiser_prefix, peft_from_file
    from lorastudio.lora.text_encoders import folded_peft, split_text_encoders

    tensors, metadata = read_lora_file(path)
    denoiser, encoders = split_text_encoders(tensors)
    state: dict[str, torch.Tensor] = {}
    if denoiser:
        lora = fold_strength(peft_from_file(denoiser, metadata, layout))
        state = {f"{denoiser_prefix(layout)}.{k}": v for k, v in lora.tensors.items()}
    folded = folded_peft(encoders, metadata, family)  # each layer at scale 1, A and B both there
    merged: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for key, value in folded.items():
        if key.partition(".")[0] not in unread:
            state[key] = value
        elif key.endswith(_A):
            merged[key.removesuffix(_A)] = (value, folded[key.removesuffix(_A) + _B])
    return ForeignLora(state, merged)


def merge_layers(
    pipe: DiffusionPipeline, path: Path, merged: dict[str, tuple[torch.Tensor, torch.Tensor]], strength: float
) -> None:
    """Merge `merged` (ForeignLora.merged of `path`) into the pipeline's weights at `strength`,
    W <- W + strength * B @ A (ComfyUI's rule; alpha / rank is in B), each original kept for
    restore_lycoris first. Raises ModelSourceError naming a layer of no module of the component or
    of another shape (nothing of the file is merged then: what was merged is restored by the
    caller's unload)."""
    from lorastudio.generate.lycoris_patch import keep_original
    from lorastudio.lora.text_encoder_names import file_module

    plans = []
    for layer, (a, b) in merged.items():
        component, _, module = layer.partition(".")
        model = getattr(pipe, component, None)
        if not isinstance(model, torch.nn.Module):
            raise ModelSourceError(
                f"cannot apply LoRA {path}: {type(pipe).__name__} has no {component} for {layer}"
            )
        cls = type(model).__name__
        target = next((m for n, m in model.named_modules() if file_module(n, cls) == module), None)
        weight = getattr(target, "weight", None)
        shape = (b.shape[0], a.shape[1])
        if not isinstance(weight, torch.nn.Parameter) or tuple(weight.shape) != shape:
            found = "no layer" if weight is None else f"a weight of {tuple(weight.shape)}"
            raise ModelSourceError(
                f"cannot apply LoRA {path}: layer {layer} ({shape}) is {found} of this {cls}"
            )
        plans.append((weight, a, b))
    with torch.no_grad():
        for weight, a, b in plans:
            keep_original(pipe, weight)
            delta = b.to(weight.device, torch.float32) @ a.to(weight.device, torch.float32)  # [out, in]
            weight.copy_((weight.float() + strength * delta).to(weight.dtype))
