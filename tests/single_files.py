"""TEST-ONLY: write a tiny pipeline folder as a single-file checkpoint in the original key layout
(SDXL: SGM's U-Net + VAE + CLIP-L + OpenCLIP-bigG; FLUX.1 / Chroma: BFL's transformer), the
reverse of what diffusers' from_single_file (and families/bfl_keys.py) convert.

diffusers ships no reverse converter in the package (its scripts/convert_diffusers_to_original_
sdxl.py is not installed), so this one is written here, for tests only; its correctness is
tested by the round trip (the forward converters give back the diffusers weights exactly).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

_RESNET = (("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("norm2", "out_layers.0"),
           ("conv2", "out_layers.3"), ("time_emb_proj", "emb_layers.1"), ("conv_shortcut", "skip_connection"))  # fmt: skip


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _json(path: Path) -> dict:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def sdxl_unet_to_sgm(sd: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """diffusers UNet2DConditionModel keys -> SGM `model.diffusion_model.*` keys."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    n = config["layers_per_block"] + 1
    table = {
        **DIFFUSERS_TO_LDM_MAPPING["unet"]["layers"],
        **DIFFUSERS_TO_LDM_MAPPING["unet"]["addition_embed_type"],
    }
    up_attn = {int(k.split(".")[1]) for k in sd if k.startswith("up_blocks.") and ".attentions." in k}
    out = {}
    for key, value in sd.items():
        if key in table:
            out[table[key]] = value
            continue
        m = re.match(
            r"(down|up)_blocks\.(\d+)\.(resnets|attentions|downsamplers|upsamplers)\.(\d+)\.(.*)", key
        )
        mid = re.match(r"mid_block\.(resnets|attentions)\.(\d+)\.(.*)", key)
        if m:
            side, b, kind, j, rest = m.group(1), int(m.group(2)), m.group(3), int(m.group(4)), m.group(5)
            base = f"input_blocks.{1 + b * n + j}" if side == "down" else f"output_blocks.{b * n + j}"
            if kind == "resnets":
                new = f"{base}.0.{_resnet(rest)}"
            elif kind == "attentions":
                new = f"{base}.1.{rest}"
            elif kind == "downsamplers":
                new = f"input_blocks.{1 + b * n + n - 1}.0.op.{rest.removeprefix('conv.')}"
            else:
                new = f"output_blocks.{b * n + n - 1}.{2 if b in up_attn else 1}.{rest}"
        elif mid:
            kind, j, rest = mid.group(1), int(mid.group(2)), mid.group(3)
            new = f"middle_block.{2 * j}.{_resnet(rest)}" if kind == "resnets" else f"middle_block.1.{rest}"
        else:
            raise KeyError(key)
        out[new] = value
    return {f"model.diffusion_model.{k}": v for k, v in out.items()}


def _resnet(rest: str) -> str:
    for new, old in _RESNET:
        if rest.startswith(new + "."):
            return old + rest[len(new) :]
    return rest


def sdxl_vae_to_ldm(sd: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """diffusers AutoencoderKL keys -> LDM `first_stage_model.*` keys."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    table = DIFFUSERS_TO_LDM_MAPPING["vae"]
    n_up = len(config["up_block_types"])
    out = {}
    for key, value in sd.items():
        if key in table:
            out[table[key]] = value
            continue
        new = re.sub(r"encoder\.down_blocks\.(\d+)\.resnets\.", r"encoder.down.\1.block.", key)
        new = re.sub(r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.", r"encoder.down.\1.downsample.", new)
        new = re.sub(
            r"decoder\.up_blocks\.(\d+)\.resnets\.",
            lambda m: f"decoder.up.{n_up - 1 - int(m[1])}.block.",
            new,
        )
        new = re.sub(
            r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.",
            lambda m: f"decoder.up.{n_up - 1 - int(m[1])}.upsample.",
            new,
        )
        new = re.sub(r"mid_block\.resnets\.(\d+)\.", lambda m: f"mid.block_{int(m[1]) + 1}.", new)
        new = new.replace("conv_shortcut", "nin_shortcut")
        if "mid_block.attentions.0." in new:
            new = new.replace("mid_block.attentions.0.", "mid.attn_1.")
            for a, b in (
                ("group_norm", "norm"),
                ("to_q", "q"),
                ("to_k", "k"),
                ("to_v", "v"),
                ("to_out.0", "proj_out"),
            ):
                new = new.replace(f".{a}.", f".{b}.")
            if value.ndim == 2:
                value = value[:, :, None, None]  # LDM's attention projections are 1x1 convolutions
        out[new] = value
    return {f"first_stage_model.{k}": v for k, v in out.items()}


def clip_l_to_sgm(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {
        "conditioner.embedders.0.transformer." + (k if k.startswith("text_model.") else f"text_model.{k}"): v
        for k, v in sd.items()
        if not k.endswith("position_ids")
    }


def open_clip_to_sgm(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CLIPTextModelWithProjection keys -> SGM's OpenCLIP `conditioner.embedders.1.model.*`."""
    p = "conditioner.embedders.1.model."
    out = {
        p + "positional_embedding": sd["text_model.embeddings.position_embedding.weight"],
        p + "token_embedding.weight": sd["text_model.embeddings.token_embedding.weight"],
        p + "ln_final.weight": sd["text_model.final_layer_norm.weight"],
        p + "ln_final.bias": sd["text_model.final_layer_norm.bias"],
        p + "text_projection": sd["text_projection.weight"].T.contiguous(),
    }
    layers = {int(k.split(".")[3]) for k in sd if k.startswith("text_model.encoder.layers.")}
    for i in layers:
        d, o = f"text_model.encoder.layers.{i}.", f"{p}transformer.resblocks.{i}."
        for part in ("weight", "bias"):
            out[f"{o}attn.in_proj_{part}"] = torch.cat([sd[f"{d}self_attn.{x}_proj.{part}"] for x in "qkv"])
            for a, b in (("self_attn.out_proj", "attn.out_proj"), ("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"),
                         ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj")):  # fmt: skip
                out[f"{o}{b}.{part}"] = sd[f"{d}{a}.{part}"]
    return out


def write_sdxl_file(
    folder: Path, out: Path, *, drop: tuple[str, ...] = (), extra: dict | None = None
) -> Path:
    """The tiny SDXL pipeline `folder` as one SGM-layout .safetensors (keys starting with an
    entry of `drop` left out; `extra` tensors added, e.g. the v_pred marker)."""
    sd = sdxl_unet_to_sgm(_weights(folder / "unet"), _json(folder / "unet" / "config.json"))
    sd |= sdxl_vae_to_ldm(_weights(folder / "vae"), _json(folder / "vae" / "config.json"))
    sd |= clip_l_to_sgm(_weights(folder / "text_encoder"))
    sd |= open_clip_to_sgm(_weights(folder / "text_encoder_2"))
    sd = {k: v.contiguous() for k, v in sd.items() if not k.startswith(drop)} | (extra or {})
    save_file(sd, str(out))
    return out


def flux_to_bfl(sd: dict[str, torch.Tensor], chroma: bool = False) -> dict[str, torch.Tensor]:
    """diffusers FluxTransformer2DModel / ChromaTransformer2DModel keys -> BFL's."""
    out: dict[str, torch.Tensor] = {}
    top = {"context_embedder": "txt_in", "x_embedder": "img_in", "proj_out": "final_layer.linear",
           "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
           "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
           "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
           "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
           "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
           "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
           "distilled_guidance_layer.in_proj": "distilled_guidance_layer.in_proj",
           "distilled_guidance_layer.out_proj": "distilled_guidance_layer.out_proj"}  # fmt: skip
    for d, b in top.items():
        for part in ("weight", "bias"):
            if f"{d}.{part}" in sd:
                out[f"{b}.{part}"] = sd[f"{d}.{part}"]
    for part in ("weight", "bias"):
        if f"norm_out.linear.{part}" in sd:
            scale, shift = sd[f"norm_out.linear.{part}"].chunk(2)
            out[f"final_layer.adaLN_modulation.1.{part}"] = torch.cat([shift, scale])
    for k, v in sd.items():
        if m := re.fullmatch(r"distilled_guidance_layer\.layers\.(\d+)\.linear_(1|2)\.(weight|bias)", k):
            out[f"distilled_guidance_layer.layers.{m[1]}.{'in' if m[2] == '1' else 'out'}_layer.{m[3]}"] = v
        elif m := re.fullmatch(r"distilled_guidance_layer\.norms\.(\d+)\.weight", k):
            out[f"distilled_guidance_layer.norms.{m[1]}.scale"] = v
    doubles = {int(k.split(".")[1]) for k in sd if k.startswith("transformer_blocks.")}
    singles = {int(k.split(".")[1]) for k in sd if k.startswith("single_transformer_blocks.")}
    for i in doubles:
        d, b = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        for part in ("weight", "bias"):
            out[f"{b}img_attn.qkv.{part}"] = torch.cat([sd[f"{d}attn.to_{x}.{part}"] for x in "qkv"])
            out[f"{b}txt_attn.qkv.{part}"] = torch.cat([sd[f"{d}attn.add_{x}_proj.{part}"] for x in "qkv"])
            pairs = {"ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2", "ff_context.net.0.proj": "txt_mlp.0",
                     "ff_context.net.2": "txt_mlp.2", "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj"}  # fmt: skip
            if not chroma:
                pairs |= {"norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin"}
            for a, c in pairs.items():
                out[f"{b}{c}.{part}"] = sd[f"{d}{a}.{part}"]
        for a, c in {"norm_q": "img_attn.norm.query_norm", "norm_k": "img_attn.norm.key_norm",
                     "norm_added_q": "txt_attn.norm.query_norm", "norm_added_k": "txt_attn.norm.key_norm"}.items():  # fmt: skip
            out[f"{b}{c}.scale"] = sd[f"{d}attn.{a}.weight"]
    for i in singles:
        d, b = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        for part in ("weight", "bias"):
            parts = [sd[f"{d}attn.to_{x}.{part}"] for x in "qkv"] + [sd[f"{d}proj_mlp.{part}"]]
            out[f"{b}linear1.{part}"] = torch.cat(parts)
            out[f"{b}linear2.{part}"] = sd[f"{d}proj_out.{part}"]
            if not chroma:
                out[f"{b}modulation.lin.{part}"] = sd[f"{d}norm.linear.{part}"]
        out[f"{b}norm.query_norm.scale"] = sd[f"{d}attn.norm_q.weight"]
        out[f"{b}norm.key_norm.scale"] = sd[f"{d}attn.norm_k.weight"]
    return out


def write_transformer_file(
    folder: Path, out: Path, *, chroma: bool = False, drop: tuple[str, ...] = (), prefix: str = ""
) -> Path:
    """The tiny FLUX.1 / Chroma pipeline's transformer as one BFL-layout .safetensors."""
    sd = flux_to_bfl(_weights(folder / "transformer"), chroma=chroma)
    save_file({prefix + k: v.contiguous() for k, v in sd.items() if not k.startswith(drop)}, str(out))
    return out
