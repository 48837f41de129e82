"""Module names: diffusers (what peft trains) <-> the original checkpoint layout (what kohya
sd-scripts and ComfyUI address), per family.

Names here are module paths without the `.weight` suffix and without any file prefix:
  SDXL   diffusers `down_blocks.1.attentions.0.proj_in` <-> SGM `input_blocks.4.1.proj_in`
  FLUX.1 diffusers `transformer_blocks.0.attn.to_q` <-> BFL `double_blocks.0.img_attn.qkv` (part 0
         of a fused linear: see FUSED_PARTS)
  FLUX.2 (dev, klein): BFL names too, in lora/names_flux2.py
  Chroma: FLUX.1's BFL names (KOHYA_LAYOUT_OF); Krea 2: its original names, lora/krea2_names.py
  Qwen-Image, Z-Image: ComfyUI addresses the diffusers names (Z-Image maps them onto its fused
         `attention.qkv` itself), so no renaming is needed.

`undot(name, family)` turns kohya's underscored form (`input_blocks_4_1_proj_in`) back into the
dotted one, keeping the family's multi-word names (`proj_in`, `to_q`, ...) whole.
"""

from __future__ import annotations

import re

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.lora import names_flux2
from lorastudio.lora.krea2_names import WORDS as KREA2_WORDS
from lorastudio.lora.krea2_names import krea2_from_original, krea2_to_original

# families whose kohya / ComfyUI files use another family's layout, because their original
# checkpoints keep that family's module names: Chroma keeps FLUX.1's double_blocks /
# single_blocks (ComfyUI's Chroma model subclasses its Flux one and maps LoRAs the same way); FLUX.1
# Kontext is FLUX.1's transformer (ComfyUI loads its LoRAs as FLUX.1 ones); Qwen-Image-Edit is
# Qwen-Image's transformer (ComfyUI's QwenImage model runs both and maps their LoRAs alike)
KOHYA_LAYOUT_OF: dict[str, str] = {"chroma": "flux", "flux-kontext": "flux", "qwen-image-edit": "qwen-image"}
# families whose ComfyUI files are `diffusion_model.<original name>.lora_A / .lora_B` (peft
# suffixes) rather than kohya's `lora_unet_<name>.lora_down / .lora_up`
PEFT_SUFFIXED: frozenset[str] = frozenset({"z-image", "krea2"})
# ...of which these carry no `.alpha` key: diffusers' Krea 2 reader refuses any key it does not
# map, so alpha / rank is folded into lora_B (ComfyUI and diffusers then both apply scale 1)
ALPHA_IN_B: frozenset[str] = frozenset({"krea2"})
SDXL_LAYERS_PER_BLOCK = 2  # every SDXL U-Net (and the tiny one): input blocks hold 2 + 1 downsampler

# fused original linear -> its diffusers parts, in row order; "*" is the block index
FLUX_FUSED: dict[str, tuple[str, ...]] = {
    "double_blocks.*.img_attn.qkv": ("attn.to_q", "attn.to_k", "attn.to_v"),
    "double_blocks.*.txt_attn.qkv": ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
    "single_blocks.*.linear1": ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"),
}
FLUX_MLP_RATIO = 4  # FluxSingleTransformerBlock: proj_mlp has 4 x hidden outputs

_FLUX_DOUBLE = {
    "attn.to_out.0": "img_attn.proj",
    "attn.to_add_out": "txt_attn.proj",
    "ff.net.0.proj": "img_mlp.0",
    "ff.net.2": "img_mlp.2",
    "ff_context.net.0.proj": "txt_mlp.0",
    "ff_context.net.2": "txt_mlp.2",
    "norm1.linear": "img_mod.lin",
    "norm1_context.linear": "txt_mod.lin",
}
_FLUX_SINGLE = {"proj_out": "linear2", "norm.linear": "modulation.lin"}
_FLUX_TOP = {
    "x_embedder": "img_in",
    "context_embedder": "txt_in",
    "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
    "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
    "norm_out.linear": "final_layer.adaLN_modulation.1",  # (scale, shift) rows swapped: see convert
    "proj_out": "final_layer.linear",
}
FLUX_SWAPPED = "final_layer.adaLN_modulation.1"

_SDXL_RESNET = {"conv1": "in_layers.2", "conv2": "out_layers.3", "time_emb_proj": "emb_layers.1"}
_SDXL_RESNET.update({"conv_shortcut": "skip_connection"})
_SDXL_TOP = {
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "add_embedding.linear_1": "label_emb.0.0",
    "add_embedding.linear_2": "label_emb.0.2",
    "conv_in": "input_blocks.0.0",
    "conv_out": "out.2",
}

# multi-word names kept whole when re-dotting kohya's underscored names
_WORDS: dict[str, tuple[str, ...]] = {
    "sdxl": (
        "input_blocks", "middle_block", "output_blocks", "transformer_blocks", "proj_in", "proj_out",
        "to_q", "to_k", "to_v", "to_out", "in_layers", "out_layers", "emb_layers", "skip_connection",
        "time_embed", "label_emb",
    ),
    "flux": (
        "double_blocks", "single_blocks", "img_attn", "txt_attn", "img_mlp", "txt_mlp", "img_mod",
        "txt_mod", "img_in", "txt_in", "time_in", "vector_in", "guidance_in", "in_layer", "out_layer",
        "final_layer", "adaLN_modulation", "distilled_guidance_layer", "in_proj", "out_proj",
    ),
    "qwen-image": (
        "transformer_blocks", "to_q", "to_k", "to_v", "to_out", "add_q_proj", "add_k_proj", "add_v_proj",
        "to_add_out", "img_mlp", "txt_mlp", "img_mod", "txt_mod", "img_in", "txt_in", "proj_out",
        "norm_out", "time_text_embed", "timestep_embedder", "linear_1", "linear_2",
    ),
    "flux2": names_flux2.WORDS,
    "flux2-klein": names_flux2.WORDS,
    "krea2": KREA2_WORDS,
}  # fmt: skip


def to_original(name: str, family: str) -> str:
    """diffusers module name -> the original layout's, for the families whose names are renamed
    one to one (SDXL, Krea 2); others keep the diffusers name. Raises ConfigError if unmapped."""
    if family == "sdxl":
        return sdxl_to_original(name)
    if family == "krea2":
        native = krea2_to_original(name)
        if native is None:
            raise _unsupported(name, family)
        return native
    return name


def from_original(name: str, family: str) -> str:
    """Inverse of to_original. Raises ConfigError for a name of no layer."""
    if family == "sdxl":
        return sdxl_from_original(name)
    if family == "krea2":
        module = krea2_from_original(name)
        if module is None:
            raise _unsupported(name, family)
        return module
    return name


def kohya_layout(family: str) -> str:
    """The family whose kohya / ComfyUI layout `family`'s LoRA files use (itself unless listed
    in KOHYA_LAYOUT_OF)."""
    return KOHYA_LAYOUT_OF.get(family, family)


def _unsupported(name: str, family: str) -> ConfigError:
    return ConfigError(
        [FieldProblem("lora_format", f"{family}: no kohya name is known for the LoRA layer {name!r}")]
    )


def sdxl_to_original(name: str) -> str:
    """diffusers U-Net module name -> SGM (kohya/ComfyUI) name. Raises ConfigError if unmapped."""
    per = SDXL_LAYERS_PER_BLOCK + 1
    if name in _SDXL_TOP:
        return _SDXL_TOP[name]
    m = re.fullmatch(r"(down|up)_blocks\.(\d+)\.(attentions|resnets)\.(\d+)\.(.+)", name)
    if m:
        side, i, kind, j, rest = m.group(1), int(m.group(2)), m.group(3), int(m.group(4)), m.group(5)
        index = 1 + per * i + j if side == "down" else per * i + j
        group = "input_blocks" if side == "down" else "output_blocks"
        if kind == "attentions":
            return f"{group}.{index}.1.{rest}"
        if rest in _SDXL_RESNET:
            return f"{group}.{index}.0.{_SDXL_RESNET[rest]}"
    m = re.fullmatch(r"mid_block\.(attentions|resnets)\.(\d+)\.(.+)", name)
    if m and m.group(1) == "attentions" and m.group(2) == "0":
        return f"middle_block.1.{m.group(3)}"
    if m and m.group(1) == "resnets" and m.group(3) in _SDXL_RESNET:
        return f"middle_block.{2 * int(m.group(2))}.{_SDXL_RESNET[m.group(3)]}"
    raise _unsupported(name, "sdxl")


# SGM layers no LoRA of ours targets, read by sdxl_from_original only: the resnets' GroupNorms,
# the output GroupNorm, the down / up samplers' convs (ComfyUI's trainer node adapts every layer:
# a LoRA on the convs, a `.diff` / `.diff_b` on the norms' weights and biases)
_SDXL_RESNET_NORMS = {"norm1": "in_layers.0", "norm2": "out_layers.0"}
_SDXL_TOP_NORMS = {"conv_norm_out": "out.0"}


def sdxl_from_original(name: str) -> str:
    """SGM module name -> diffusers U-Net name (inverse of sdxl_to_original; also the layers of
    _SDXL_RESNET_NORMS / _SDXL_TOP_NORMS and the samplers: `input_blocks.<n>.0.op` a
    downsampler's conv, `output_blocks.<n>.<1|2>.conv` an upsampler's)."""
    per = SDXL_LAYERS_PER_BLOCK + 1
    top = {v: k for k, v in (_SDXL_TOP | _SDXL_TOP_NORMS).items()}
    resnet = {v: k for k, v in (_SDXL_RESNET | _SDXL_RESNET_NORMS).items()}
    if name in top:
        return top[name]
    m = re.fullmatch(r"(input|output)_blocks\.(\d+)\.([012])\.(.+)", name)
    if m:
        side, n, inner, rest = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        i, j = divmod(n - 1, per) if side == "input" else divmod(n, per)
        group = "down_blocks" if side == "input" else "up_blocks"
        if side == "input" and j == per - 1 and inner == "0" and rest == "op":
            return f"down_blocks.{i}.downsamplers.0.conv"
        if side == "output" and j == per - 1 and inner in "12" and rest == "conv":
            return f"up_blocks.{i}.upsamplers.0.conv"
        if inner == "2":  # an up block's third layer is its upsampler alone
            raise _unsupported(name, "sdxl")
        if inner == "1":
            return f"{group}.{i}.attentions.{j}.{rest}"
        if rest in resnet:
            return f"{group}.{i}.resnets.{j}.{resnet[rest]}"
    m = re.fullmatch(r"middle_block\.([012])\.(.+)", name)
    if m and m.group(1) == "1":
        return f"mid_block.attentions.0.{m.group(2)}"
    if m and m.group(2) in resnet:
        return f"mid_block.resnets.{int(m.group(1)) // 2}.{resnet[m.group(2)]}"
    raise _unsupported(name, "sdxl")


# Z-Image's layers under ComfyUI's own (Lumina 2) names where they are not its diffusers names:
# ComfyUI's z_image_to_diffusers table (comfy/utils.py) restated, read only (generation's merge
# of the files ComfyUI's trainer node writes, generate/lycoris_names.py); every other ComfyUI
# name of Z-Image is its diffusers name
_Z_IMAGE_COMFY_BLOCK = {
    "attention.out": "attention.to_out.0",
    "attention.q_norm": "attention.norm_q",
    "attention.k_norm": "attention.norm_k",
}
_Z_IMAGE_COMFY_TOP = {
    "final_layer.linear": "all_final_layer.2-1.linear",
    "final_layer.adaLN_modulation.1": "all_final_layer.2-1.adaLN_modulation.1",
    "x_embedder": "all_x_embedder.2-1",
}
Z_IMAGE_FUSED_QKV = ("attention.to_q", "attention.to_k", "attention.to_v")  # attention.qkv's rows


def z_image_from_comfy(name: str) -> list[str]:
    """Z-Image module name in ComfyUI's model -> its diffusers module names (q, k, v for the
    fused `attention.qkv`, in row order); a name ComfyUI shares with diffusers comes back as it
    is (whether it is a layer is the caller's to check)."""
    if name in _Z_IMAGE_COMFY_TOP:
        return [_Z_IMAGE_COMFY_TOP[name]]
    m = re.fullmatch(r"((?:layers|noise_refiner|context_refiner)\.\d+)\.(.+)", name)
    if m and m.group(2) == "attention.qkv":
        return [f"{m.group(1)}.{part}" for part in Z_IMAGE_FUSED_QKV]
    if m and m.group(2) in _Z_IMAGE_COMFY_BLOCK:
        return [f"{m.group(1)}.{_Z_IMAGE_COMFY_BLOCK[m.group(2)]}"]
    return [name]


def flux_to_original(name: str) -> tuple[str, int | None]:
    """diffusers FLUX.1 module name -> (BFL name, part index within a fused linear or None)."""
    if name in _FLUX_TOP:
        return _FLUX_TOP[name], None
    m = re.fullmatch(r"(transformer_blocks|single_transformer_blocks)\.(\d+)\.(.+)", name)
    if m:
        double = m.group(1) == "transformer_blocks"
        block, rest = m.group(2), m.group(3)
        prefix = f"double_blocks.{block}." if double else f"single_blocks.{block}."
        for fused, parts in FLUX_FUSED.items():
            if fused.startswith("double" if double else "single") and rest in parts:
                return prefix + fused.split(".*.")[1], parts.index(rest)
        table = _FLUX_DOUBLE if double else _FLUX_SINGLE
        if rest in table:
            return prefix + table[rest], None
    raise _unsupported(name, "flux")


def flux_from_flat(flat: str) -> str:
    """A diffusers FLUX.1 module name from its underscored form (OneTrainer's `lora_transformer_`
    keys: `transformer_blocks_0_attn_to_q` -> `transformer_blocks.0.attn.to_q`): only a module
    the kohya layout maps (flux_to_original) is named, each underscored form being one name.
    Raises ConfigError for any other."""
    for name in _FLUX_TOP:
        if flat == name.replace(".", "_"):
            return name
    m = re.fullmatch(r"(single_transformer_blocks|transformer_blocks)_(\d+)_(.+)", flat)
    if m:
        double = m.group(1) == "transformer_blocks"
        kind = "double" if double else "single"
        rests = [*(_FLUX_DOUBLE if double else _FLUX_SINGLE)]
        rests += [p for fused, parts in FLUX_FUSED.items() if fused.startswith(kind) for p in parts]
        for rest in rests:
            if m.group(3) == rest.replace(".", "_"):
                return f"{m.group(1)}.{m.group(2)}.{rest}"
    raise _unsupported(flat, "flux")


# Chroma's approximator in its checkpoint's names (lodestone's Approximator: in_proj, layers.N
# (MLPEmbedder in_layer / out_layer), out_proj), which ComfyUI's Chroma model and ai-toolkit's
# hold -> diffusers' ChromaApproximator: read only (the writer names no approximator layer)
_CHROMA_APPROXIMATOR = re.compile(r"distilled_guidance_layer\.(in_proj|out_proj|layers\.\d+\.(in|out)_layer)")


def flux_from_original(name: str) -> list[str]:
    """BFL module name -> its diffusers module names (several for a fused linear, in row order;
    the blocks' q / k norms too, as FLUX.2's: names_flux2.QK_NORMS_*; Chroma's approximator,
    whose `layers.N.in_layer` / `out_layer` are diffusers' `linear_1` / `linear_2`)."""
    top = {v: k for k, v in _FLUX_TOP.items()}
    if name in top:
        return [top[name]]
    if _CHROMA_APPROXIMATOR.fullmatch(name):
        return [name.replace(".in_layer", ".linear_1").replace(".out_layer", ".linear_2")]
    m = re.fullmatch(r"(double|single)_blocks\.(\d+)\.(.+)", name)
    if m:
        double = m.group(1) == "double"
        block, rest = m.group(2), m.group(3)
        prefix = f"transformer_blocks.{block}." if double else f"single_transformer_blocks.{block}."
        fused = FLUX_FUSED.get(f"{m.group(1)}_blocks.*.{rest}")
        if fused is not None:
            return [prefix + p for p in fused]
        own = (
            _FLUX_DOUBLE | names_flux2.QK_NORMS_DOUBLE
            if double
            else _FLUX_SINGLE | names_flux2.QK_NORMS_SINGLE
        )
        table = {v: k for k, v in own.items()}
        if rest in table:
            return [prefix + table[rest]]
    raise _unsupported(name, "flux")


def undot(flat: str, family: str) -> str:
    """kohya's underscored module name -> the dotted one (`input_blocks_4_1_proj_in` ->
    `input_blocks.4.1.proj_in`), keeping the family's multi-word names whole."""
    words = sorted((w.split("_") for w in _WORDS.get(family, ())), key=len, reverse=True)
    parts, out, i = flat.split("_"), [], 0
    while i < len(parts):
        for w in words:
            if parts[i : i + len(w)] == w:
                out.append("_".join(w))
                i += len(w)
                break
        else:
            out.append(parts[i])
            i += 1
    return ".".join(out)
