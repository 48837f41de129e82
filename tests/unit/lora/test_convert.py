"""Pure conversions diffusers/peft <-> kohya/ComfyUI on synthetic state dicts shaped like the
real tiny denoisers (every layer a LoRA can target), and ComfyUI's key check on them."""

from __future__ import annotations

import pytest
import torch

from lorastudio.errors import ConfigError
from lorastudio.lora import names
from lorastudio.lora.comfy import check_comfy_keys, comfy_key_map
from lorastudio.lora.convert import to_kohya, unmapped_layers
from lorastudio.lora.convert_read import to_diffusers

FAMILIES = [
    "sdxl",
    "flux",
    "qwen-image",
    "z-image",
    "flux2",
    "flux2-klein",
    "flux-kontext",
    "qwen-image-edit",
]
RANK, ALPHA = 4, 8.0
# layers that have no kohya/SGM name (down/upsampler convs) are left out of the SDXL layout
NO_KOHYA_NAME = ("downsamplers", "upsamplers")


def _synthetic(shapes: dict[str, tuple[int, ...]], seed: int = 0, skip: tuple[str, ...] = ()) -> dict:
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, shape in shapes.items():
        if any(s in name for s in NO_KOHYA_NAME + skip):
            continue
        out, inp = shape[0], shape[1]
        a_shape = (RANK, inp, *shape[2:]) if len(shape) == 4 else (RANK, inp)  # [r, in(, kh, kw)]
        b_shape = (out, RANK, 1, 1) if len(shape) == 4 else (out, RANK)  # [out, r(, 1, 1)]
        sd[f"{name}.lora_A.weight"] = torch.randn(a_shape, generator=g)
        sd[f"{name}.lora_B.weight"] = torch.randn(b_shape, generator=g)
    return sd


@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_is_lossless_for_every_layer(family, layer_shapes):
    peft = _synthetic(layer_shapes(family))
    kohya = to_kohya(peft, family, ALPHA)
    back = to_diffusers(kohya, family)
    assert back.tensors.keys() == peft.keys()
    assert all(torch.equal(back.tensors[k], peft[k]) for k in peft)
    assert (back.rank, back.alpha) == (RANK, ALPHA)
    again = to_kohya(back.tensors, family, back.alpha)
    assert again.keys() == kohya.keys() and all(torch.equal(again[k], kohya[k]) for k in kohya)


@pytest.mark.parametrize("family", FAMILIES)
def test_comfyui_consumes_every_key_of_the_kohya_layout(family, layer_shapes):
    shapes = layer_shapes(family)
    kohya = to_kohya(_synthetic(shapes), family, ALPHA)
    result = check_comfy_keys({k: tuple(v.shape) for k, v in kohya.items()}, comfy_key_map(family, shapes))
    assert result.ok, (result.unconsumed[:5], result.mismatched[:5])
    prefix = "diffusion_model." if family == "z-image" else "lora_unet_"
    assert all(k.startswith(prefix) for k in kohya)


def test_comfyui_check_reports_foreign_keys_and_wrong_shapes(layer_shapes):
    shapes = layer_shapes("sdxl")
    kohya = to_kohya(_synthetic(shapes), "sdxl", ALPHA)
    diffusers_keys = {f"unet.{k}": tuple(v.shape) for k, v in _synthetic(shapes).items()}
    # ComfyUI maps SDXL diffusers names only in the `processor.to_q` spelling: every attention
    # projection of a diffusers file is left out, the other layers (proj_in, ff, convs) load
    attention = {k for k in diffusers_keys if ".to_" in k}
    assert attention and len(attention) < len(diffusers_keys)
    assert set(check_comfy_keys(diffusers_keys, comfy_key_map("sdxl", shapes)).unconsumed) == attention
    key = "lora_unet_input_blocks_4_1_proj_in.lora_up.weight"
    bad = {k: tuple(v.shape) for k, v in kohya.items()} | {key: (999, RANK), "lora_unet_nonsense.alpha": ()}
    result = check_comfy_keys(bad, comfy_key_map("sdxl", shapes))
    assert result.unconsumed == ["lora_unet_nonsense.alpha"]
    assert [m.split(":")[0] for m in result.mismatched] == ["lora_unet_input_blocks_4_1_proj_in"]


def test_sdxl_names_follow_the_sgm_layout():
    # kohya sd-scripts' SDXL U-Net: 2 resnets + 1 downsampler per input block, 3 layers per output block
    assert names.sdxl_to_original("down_blocks.1.attentions.0.proj_in") == "input_blocks.4.1.proj_in"
    assert names.sdxl_to_original("down_blocks.2.attentions.1.transformer_blocks.3.attn1.to_q") == (
        "input_blocks.8.1.transformer_blocks.3.attn1.to_q"
    )
    assert names.sdxl_to_original("mid_block.attentions.0.proj_out") == "middle_block.1.proj_out"
    assert names.sdxl_to_original("up_blocks.0.attentions.2.proj_out") == "output_blocks.2.1.proj_out"
    assert names.sdxl_to_original("up_blocks.1.resnets.0.time_emb_proj") == "output_blocks.3.0.emb_layers.1"
    kohya = to_kohya(
        {"down_blocks.1.attentions.0.proj_in.lora_A.weight": torch.ones(2, 3)}
        | {"down_blocks.1.attentions.0.proj_in.lora_B.weight": torch.ones(5, 2)},
        "sdxl",
        1.0,
    )
    assert set(kohya) == {
        f"lora_unet_input_blocks_4_1_proj_in.{s}" for s in ("lora_down.weight", "lora_up.weight", "alpha")
    }


def test_flux_qkv_is_one_fused_linear_with_block_diagonal_up(layer_shapes):
    peft = _synthetic(layer_shapes("flux"))
    kohya = to_kohya(peft, "flux", ALPHA)
    base = "lora_unet_double_blocks_0_img_attn_qkv"
    a = [peft[f"transformer_blocks.0.attn.to_{p}.lora_A.weight"] for p in "qkv"]
    b = [peft[f"transformer_blocks.0.attn.to_{p}.lora_B.weight"] for p in "qkv"]
    assert torch.equal(kohya[base + ".lora_down.weight"], torch.cat(a))  # [3r, in]
    assert torch.equal(kohya[base + ".lora_up.weight"], torch.block_diag(*b))  # [3 out, 3r]
    assert kohya[base + ".alpha"].item() == 3 * ALPHA  # same alpha / rank as each part
    # the fused LoRA adds exactly the three parts' deltas
    fused = kohya[base + ".lora_up.weight"] @ kohya[base + ".lora_down.weight"] * (3 * ALPHA) / (3 * RANK)
    parts = torch.cat([bi @ ai * ALPHA / RANK for ai, bi in zip(a, b, strict=True)])
    torch.testing.assert_close(fused, parts)
    single = "lora_unet_single_blocks_0_linear1.lora_up.weight"
    hidden = layer_shapes("flux")["single_transformer_blocks.0.attn.to_q"][1]
    assert kohya[single].shape == (7 * hidden, 4 * RANK)  # q, k, v + 4 x hidden mlp rows


def test_flux_parts_not_trained_stay_absent_and_shared_down_files_load(layer_shapes):
    peft = _synthetic(layer_shapes("flux"), skip=("proj_mlp", "attn.to_k"))
    back = to_diffusers(to_kohya(peft, "flux", ALPHA), "flux")
    assert back.tensors.keys() == peft.keys()
    # another trainer's file: one shared down projection for q, k, v (rank r, up [3 out, r])
    hidden = layer_shapes("flux")["transformer_blocks.0.attn.to_q"][0]
    down, up = torch.randn(RANK, hidden), torch.randn(3 * hidden, RANK)
    base = "lora_unet_double_blocks_0_img_attn_qkv"
    shared = to_diffusers({base + ".lora_down.weight": down, base + ".lora_up.weight": up}, "flux")
    assert shared.rank == RANK and shared.alpha == RANK  # no alpha: alpha = rank
    for i, p in enumerate("qkv"):
        assert torch.equal(shared.tensors[f"transformer_blocks.0.attn.to_{p}.lora_A.weight"], down)
        assert torch.equal(shared.tensors[f"transformer_blocks.0.attn.to_{p}.lora_B.weight"], up.chunk(3)[i])


@pytest.mark.parametrize("family", [f for f in FAMILIES if names.kohya_layout(f) not in names.PEFT_SUFFIXED])
@pytest.mark.parametrize("suffixes", [("lora_A", "lora_B"), ("lora_down", "lora_up")])
def test_comfyuis_generic_diffusion_model_spelling_reads_as_the_kohya_layout(family, suffixes, layer_shapes):
    """ComfyUI takes every layer as `diffusion_model.<its checkpoint name>` with lora_A / lora_B or
    lora_down / lora_up (comfy/lora.py's generic key map), and so do diffusers' readers; ai-toolkit
    writes Qwen-Image so (`diffusion_model.<diffusers name>.lora_A.weight`, no alpha: alpha =
    rank). Such a file reads as the family's kohya file of the same names and alphas."""
    peft = _synthetic(layer_shapes(family))
    kohya = to_kohya(peft, family, ALPHA)
    layout = names.kohya_layout(family)
    down, up = suffixes
    generic = {}
    for key, value in kohya.items():
        flat, _, suffix = key.removeprefix("lora_unet_").partition(".")
        suffix = {"lora_down.weight": f"{down}.weight", "lora_up.weight": f"{up}.weight"}.get(suffix, suffix)
        generic[f"diffusion_model.{names.undot(flat, layout)}.{suffix}"] = value
    back = to_diffusers(generic, family)
    assert back.tensors.keys() == peft.keys() and (back.rank, back.alpha) == (RANK, ALPHA)
    assert all(torch.equal(back.tensors[k], peft[k]) for k in peft)
    if layout == "qwen-image":  # ai-toolkit's own file: peft names, no .alpha
        theirs = {f"diffusion_model.{k}": v for k, v in peft.items()}
        read = to_diffusers(theirs, family)
        assert (read.rank, read.alpha) == (RANK, float(RANK))
        assert all(torch.equal(read.tensors[k], peft[k]) for k in peft)


def test_z_image_under_comfyuis_own_names_reads_as_its_diffusers_layers(layer_shapes):
    """ComfyUI names Z-Image's layers as Lumina 2 does (its z_image_to_diffusers): q, k, v fused
    in `attention.qkv`, `attention.out`, `final_layer.*`, `x_embedder`; its own files (its
    trainer node's, its LoRA-saving nodes') use those names. They read as the diffusers layers
    (the fused qkv split by rows: block-diagonal up, rank 3r); the fused name was taken as a
    module of that name, which no diffusers Z-Image has."""
    from lorastudio.lora.names import Z_IMAGE_FUSED_QKV

    peft = _synthetic(layer_shapes("z-image"))
    renamed = {v: k for k, v in {"attention.out": "attention.to_out.0"}.items()}
    top = {
        "all_final_layer.2-1.linear": "final_layer.linear",
        "all_final_layer.2-1.adaLN_modulation.1": "final_layer.adaLN_modulation.1",
        "all_x_embedder.2-1": "x_embedder",
    }
    comfy: dict[str, torch.Tensor] = {}
    blocks = {k.rsplit(".attention.to_q", 1)[0] for k in peft if ".attention.to_q." in k}
    for block in blocks:  # fused exactly as ComfyUI's model holds it: rows q, k, v
        a = [peft[f"{block}.{p}.lora_A.weight"] for p in Z_IMAGE_FUSED_QKV]  # [r, in] each
        b = [peft[f"{block}.{p}.lora_B.weight"] for p in Z_IMAGE_FUSED_QKV]  # [h, r] each
        comfy[f"diffusion_model.{block}.attention.qkv.lora_down.weight"] = torch.cat(a)  # [3r, in]
        comfy[f"diffusion_model.{block}.attention.qkv.lora_up.weight"] = torch.block_diag(*b)  # [3h, 3r]
        comfy[f"diffusion_model.{block}.attention.qkv.alpha"] = torch.tensor(3 * ALPHA)  # the same scale
    for key, value in peft.items():
        module, _, suffix = key.rpartition(".lora_")
        if any(module.endswith(f".{p}") for p in Z_IMAGE_FUSED_QKV):
            continue
        block, _, rest = module.partition(".attention.")
        name = (
            f"{block}.{renamed.get('attention.' + rest, 'attention.' + rest)}"
            if rest
            else top.get(module, module)
        )
        kind = {"A.weight": "lora_down.weight", "B.weight": "lora_up.weight"}[suffix]
        comfy[f"diffusion_model.{name}.{kind}"] = value
        comfy[f"diffusion_model.{name}.alpha"] = torch.tensor(ALPHA)
    back = to_diffusers(comfy, "z-image")
    assert back.tensors.keys() == peft.keys()
    scale = back.alpha / back.rank  # every layer at ALPHA / RANK again
    for k in peft:
        if k.endswith("lora_B.weight"):
            a = k.replace("lora_B", "lora_A")
            torch.testing.assert_close(
                back.tensors[k] @ back.tensors[a] * scale, peft[k] @ peft[a] * (ALPHA / RANK)
            )


@pytest.mark.parametrize("family", ["flux", "sdxl"])
def test_a_comfyui_trainer_file_reads_when_its_differences_are_zero_and_is_refused_else(family, layer_shapes):
    """ComfyUI's trainer node (comfy_extras/nodes_train.py) writes `diffusion_model.<checkpoint
    name>` LoRA pairs with a trained per-layer `.alpha`, and a `.diff_b` per bias (and `.diff`
    per norm weight). No LoRA layout holds a full difference: all-zero ones are skipped, the
    layers read as the kohya file's; a non-zero one is refused with the reason (it was refused
    as 'not a flux kohya/ComfyUI key' either way)."""
    peft = _synthetic(layer_shapes(family))
    kohya = to_kohya(peft, family, ALPHA)
    layout = names.kohya_layout(family)
    trainer: dict[str, torch.Tensor] = {}
    for key, value in kohya.items():
        flat, _, suffix = key.removeprefix("lora_unet_").partition(".")
        name = f"diffusion_model.{names.undot(flat, layout)}"
        trainer[f"{name}.{suffix}"] = value
        if suffix == "lora_up.weight":
            trainer[f"{name}.diff_b"] = torch.zeros(value.shape[0])  # [out]
    trainer["diffusion_model.out.0.diff"] = torch.zeros(8)  # a norm weight's (SDXL's output GroupNorm)
    back = to_diffusers(trainer, family)
    assert back.tensors.keys() == peft.keys() and (back.rank, back.alpha) == (RANK, ALPHA)
    assert all(torch.equal(back.tensors[k], peft[k]) for k in peft)
    key = next(k for k in trainer if k.endswith(".diff_b"))
    trainer[key] = torch.ones_like(trainer[key])
    with pytest.raises(ConfigError, match="full difference of a weight or bias"):
        to_diffusers(trainer, family)


@pytest.mark.parametrize(
    ("family", "tensors", "message"),
    [
        (
            "sdxl",
            {"lora_te1_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": torch.ones(1, 1)},
            "not a sdxl",
        ),
        ("qwen-image", {"lora_unet_img_in.lora_down.weight": torch.ones(1, 1)}, "lacks"),
        ("flux", {"lora_unet_double_blocks_0_img_attn_nope.lora_down.weight": torch.ones(1, 1)}, None),
        ("sd15", {}, "no kohya layout"),
    ],
)
def test_bad_kohya_files_are_refused(family, tensors, message):
    if message is None:
        tensors = tensors | {"lora_unet_double_blocks_0_img_attn_nope.lora_up.weight": torch.ones(1, 1)}
    with pytest.raises(ConfigError, match=message or "no kohya name"):
        to_diffusers(tensors, family)


def test_mixed_ranks_keep_each_layers_scale_and_unmapped_layers_are_refused():
    """Layers of several ranks and alphas (kohya's dynamic resize) come back with each layer's
    alpha / rank folded into its up matrix; written back, each .alpha keeps that scale."""
    mixed = {
        "lora_unet_img_in.lora_down.weight": torch.ones(2, 3),
        "lora_unet_img_in.lora_up.weight": torch.ones(3, 2),
        "lora_unet_img_in.alpha": torch.tensor(1.0),
        "lora_unet_txt_in.lora_down.weight": torch.ones(4, 3),
        "lora_unet_txt_in.lora_up.weight": torch.ones(3, 4),
        "lora_unet_txt_in.alpha": torch.tensor(8.0),
    }
    back = to_diffusers(mixed, "qwen-image")
    assert back.alpha == back.rank  # scale 1: each layer's own folded in
    assert torch.equal(back.tensors["img_in.lora_B.weight"], torch.full((3, 2), 0.5))  # 1 / 2
    assert torch.equal(back.tensors["txt_in.lora_B.weight"], torch.full((3, 4), 2.0))  # 8 / 4
    again = to_kohya(back.tensors, "qwen-image", back.alpha, back.rank)
    assert {k: float(v) for k, v in again.items() if k.endswith(".alpha")} == {
        "lora_unet_img_in.alpha": 2.0,
        "lora_unet_txt_in.alpha": 4.0,
    }  # alpha = rank per layer: scale 1 where the up matrix holds the strength
    sampler = {"down_blocks.0.downsamplers.0.conv.lora_A.weight": torch.ones(1, 1)}
    sampler |= {"down_blocks.0.downsamplers.0.conv.lora_B.weight": torch.ones(1, 1)}
    with pytest.raises(ConfigError, match="no kohya name"):
        to_kohya(sampler, "sdxl", 1.0)


def test_unmapped_layers_names_what_kohya_cannot_hold(layer_shapes):
    modules = list(layer_shapes("sdxl"))
    assert sorted(unmapped_layers("sdxl", modules)) == sorted(m for m in modules if "samplers" in m)
    assert unmapped_layers("flux", list(layer_shapes("flux"))) == []


def test_a_dora_file_is_refused_saying_it_is_a_dora():
    """convert / merge / resize read LoRA layers only: a diffusers-layout DoRA's magnitude is named
    as such (it was "not a peft LoRA key")."""
    from lorastudio.lora.convert import peft_modules

    key = "transformer_blocks.0.attn.to_q"
    tensors = {f"{key}.lora_A.weight": torch.ones(4, 8), f"{key}.lora_B.weight": torch.ones(8, 4)}
    with pytest.raises(
        ConfigError, match="is a DoRA's magnitude: convert, merge and resize take LoRA files only"
    ):
        peft_modules({**tensors, f"{key}.lora_magnitude_vector": torch.ones(8)})


@pytest.mark.parametrize("family", ["flux2", "chroma"])
def test_ai_toolkits_fused_bfl_layers_read_with_their_shared_down(family, layer_shapes):
    """ai-toolkit trains FLUX.2 and Chroma on BFL-named models and saves `diffusion_model.<BFL
    name>.lora_A / lora_B`, no alpha (alpha = rank), a fused q/k/v with one down projection: each
    part reads with the whole down matrix and its rows of the up matrix (the same change)."""
    hidden = layer_shapes(family)["transformer_blocks.0.attn.to_q"][0]
    g = torch.Generator().manual_seed(0)
    down, up = torch.randn(RANK, hidden, generator=g), torch.randn(3 * hidden, RANK, generator=g)
    base = "diffusion_model.double_blocks.0.img_attn.qkv"
    read = to_diffusers({f"{base}.lora_A.weight": down, f"{base}.lora_B.weight": up}, family)
    assert (read.rank, read.alpha) == (RANK, float(RANK))
    for i, p in enumerate("qkv"):
        assert torch.equal(read.tensors[f"transformer_blocks.0.attn.to_{p}.lora_A.weight"], down)
        assert torch.equal(read.tensors[f"transformer_blocks.0.attn.to_{p}.lora_B.weight"], up.chunk(3)[i])
