"""The portability of every layout the studio writes, on synthetic adapters shaped like the tiny
denoisers' default targets, with alpha != rank (rank 4, alpha 1 and 16):

- the exact key names and `.alpha` tensors ComfyUI's code expects (comfy/lora.py
  `model_lora_keys_unet` + `load_lora`; see lorastudio.lora.comfy for the rules quoted);
- the weight ComfyUI patches (`weight += (strength * alpha / down.shape[0]) * up @ down`, alpha
  1.0 without an `.alpha` tensor; `LoRAAdapter.calculate_weight`) equals the trained
  (alpha / rank) * B @ A for both layouts, fused FLUX linears included;
- the save-time check (lorastudio.lora.portability) passes them and reports what fails: wrong
  strength, keys ComfyUI does not map, keys diffusers drops.
"""

from __future__ import annotations

import json

import pytest
import torch

from lorastudio import families
from lorastudio.lora import names
from lorastudio.lora.comfy import comfy_scale
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import ADAPTER_METADATA_KEY, file_for_layout
from lorastudio.lora.portability import check_comfyui, check_diffusers

FAMILIES = ["sdxl", "flux", "qwen-image", "z-image"]
RANK = 4


def _adapter(shapes: dict[str, tuple[int, ...]], family: str, alpha: float) -> PeftLora:
    """A random adapter on the family's default target layers (non-zero A and B)."""
    targets = families.get(family).spec.lora_targets
    g = torch.Generator().manual_seed(1)
    sd = {}
    for name, shape in shapes.items():
        if len(shape) != 2 or not any(name == t or name.endswith("." + t) for t in targets):
            continue
        sd[f"{name}.lora_A.weight"] = torch.randn(RANK, shape[1], generator=g)  # [r, in]
        sd[f"{name}.lora_B.weight"] = torch.randn(shape[0], RANK, generator=g)  # [out, r]
    assert sd
    return PeftLora(sd, RANK, alpha)


def _trained_delta(lora: PeftLora, module: str) -> torch.Tensor:
    a, b = lora.tensors[module + ".lora_A.weight"], lora.tensors[module + ".lora_B.weight"]
    return lora.alpha / lora.rank * (b @ a)  # [out, in]: what peft / diffusers add to the weight


def _comfy_delta(file: dict[str, torch.Tensor], x: str) -> torch.Tensor:
    """ComfyUI's patch of the weight mapped from file module name x (LoRAAdapter.calculate_weight)."""
    up_s, down_s = (
        (".lora_up.weight", ".lora_down.weight")
        if x + ".lora_up.weight" in file
        else (".lora_B.weight", ".lora_A.weight")
    )
    up, down = file[x + up_s], file[x + down_s]
    alpha = file[x + ".alpha"].item() if x + ".alpha" in file else None
    return comfy_scale(alpha, down.shape[0]) * (up.flatten(1) @ down.flatten(1))


def _comfy_name(family: str, layout: str, module: str, shapes: dict) -> tuple[str, slice]:
    """The file module name ComfyUI maps to `module`'s weight, and the rows of that patch that
    belong to `module` (a slice of a fused FLUX linear in the kohya layout)."""
    if layout == "diffusers":
        return "transformer." + module, slice(None)
    if family == "sdxl":
        return "lora_unet_" + names.sdxl_to_original(module).replace(".", "_"), slice(None)
    if family == "z-image":
        return "diffusion_model." + module, slice(None)
    if family == "qwen-image":
        return "lora_unet_" + module.replace(".", "_"), slice(None)
    native, part = names.flux_to_original(module)
    if part is None:
        return "lora_unet_" + native.replace(".", "_"), slice(None)
    parts = names.flux_from_original(native)
    rows = [shapes[p][0] for p in parts]
    start = sum(rows[:part])
    return "lora_unet_" + native.replace(".", "_"), slice(start, start + rows[part])


LAYOUTS = [("sdxl", "kohya")] + [(f, lay) for f in FAMILIES[1:] for lay in ("diffusers", "kohya")]


@pytest.mark.parametrize("alpha", [1.0, 16.0])
@pytest.mark.parametrize(("family", "layout"), LAYOUTS)
def test_comfyui_patches_the_trained_weight_in_every_layout(family, layout, alpha, layer_shapes):
    shapes = layer_shapes(family)
    lora = _adapter(shapes, family, alpha)
    file, header = file_for_layout(lora, family, layout, {"lorastudio.family": family})
    for module in {k.rsplit(".lora_", 1)[0] for k in lora.tensors}:
        x, rows = _comfy_name(family, layout, module, shapes)
        delta = _comfy_delta(file, x)[rows]
        torch.testing.assert_close(delta, _trained_delta(lora, module), rtol=1e-5, atol=1e-6)
    check = check_comfyui(file, header, family, shapes)
    assert check["ok"], check


@pytest.mark.parametrize("alpha", [1.0, 16.0])
def test_the_key_names_and_alpha_tensors_comfyui_expects(alpha, layer_shapes):
    """One layer per family, spelled out: the names ComfyUI's key map addresses and the `.alpha`
    it reads (kohya: alpha per layer, k * alpha on a FLUX linear fusing k parts of k * r rows;
    diffusers: no `.alpha`, alpha/rank folded into lora_B and the header's alpha = rank)."""
    sdxl = _adapter(layer_shapes("sdxl"), "sdxl", alpha)
    q = next(m for m in (k.rsplit(".lora_", 1)[0] for k in sdxl.tensors) if m.endswith("attn1.to_q"))
    kohya, _ = file_for_layout(sdxl, "sdxl", "kohya", {})
    base = "lora_unet_" + names.sdxl_to_original(q).replace(".", "_")
    assert base.startswith("lora_unet_input_blocks_") or base.startswith("lora_unet_")
    assert base.endswith("_transformer_blocks_0_attn1_to_q") and "processor" not in base
    assert {base + s for s in (".lora_down.weight", ".lora_up.weight", ".alpha")} <= kohya.keys()
    assert kohya[base + ".alpha"].item() == alpha and kohya[base + ".alpha"].dim() == 0

    flux = _adapter(layer_shapes("flux"), "flux", alpha)
    kohya, _ = file_for_layout(flux, "flux", "kohya", {})
    assert kohya["lora_unet_double_blocks_0_img_attn_qkv.alpha"].item() == 3 * alpha
    assert kohya["lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight"].shape[0] == 3 * RANK
    assert kohya["lora_unet_single_blocks_0_linear1.alpha"].item() == 4 * alpha
    for family, module in [
        ("flux", "transformer_blocks.0.attn.to_q"),
        ("qwen-image", "transformer_blocks.0.attn.to_q"),
        ("z-image", "layers.0.attention.to_q"),
    ]:
        lora = _adapter(layer_shapes(family), family, alpha)
        file, header = file_for_layout(lora, family, "diffusers", {})
        x = "transformer." + module
        assert {x + ".lora_A.weight", x + ".lora_B.weight"} <= file.keys()
        assert not any(k.endswith(".alpha") for k in file)
        torch.testing.assert_close(
            file[x + ".lora_B.weight"], alpha / RANK * lora.tensors[module + ".lora_B.weight"]
        )
        meta = json.loads(header[ADAPTER_METADATA_KEY])
        assert meta["transformer.r"] == RANK and meta["transformer.lora_alpha"] == RANK


def _unfolded_diffusers_file(lora: PeftLora, family: str) -> tuple[dict, dict]:
    """A diffusers file as written before alpha was folded: alpha only in the header."""
    prefix = "unet." if family == "sdxl" else "transformer."
    meta = {prefix + "r": lora.rank, prefix + "lora_alpha": lora.alpha}
    return {prefix + k: v for k, v in lora.tensors.items()}, {ADAPTER_METADATA_KEY: json.dumps(meta)}


def test_the_check_reports_wrong_strength_unmapped_keys_and_dropped_keys(layer_shapes):
    shapes = layer_shapes("flux")
    lora = _adapter(shapes, "flux", 16.0)
    file, header = _unfolded_diffusers_file(lora, "flux")
    check = check_comfyui(file, header, "flux", shapes)
    assert not check["ok"] and not check["unconsumed"]  # every key loads in ComfyUI ...
    assert len(check["wrong_strength"]) == len(lora.tensors) // 2  # ... at 1/4 of the strength
    assert "ComfyUI scale 1, diffusers 4" in check["wrong_strength"][0]

    sdxl_shapes = layer_shapes("sdxl")
    file, header = _unfolded_diffusers_file(_adapter(sdxl_shapes, "sdxl", 4.0), "sdxl")
    check = check_comfyui(file, header, "sdxl", sdxl_shapes)
    assert not check["ok"] and len(check["unconsumed"]) == len(file)  # attn `to_q`, not `processor.to_q`

    bare = {k.removeprefix("transformer."): v for k, v in _unfolded_diffusers_file(lora, "flux")[0].items()}
    result = check_diffusers(bare, "flux", shapes, "FluxPipeline")
    assert not result["ok"] and result["loaded"] == 0 and result["dropped"]  # no prefix: loads nothing


@pytest.mark.parametrize(("family", "layout"), LAYOUTS)
def test_diffusers_own_conversion_lands_every_layer(family, layout, layer_shapes, tiny_model):
    shapes = layer_shapes(family)
    lora = _adapter(shapes, family, 16.0)
    file, _ = file_for_layout(lora, family, layout, {})
    spec = families.get(family).spec
    unet_config = None
    if family == "sdxl":
        from diffusers import UNet2DConditionModel
        from diffusers.configuration_utils import FrozenDict

        config = UNet2DConditionModel.load_config(str(tiny_model("sdxl")), subfolder="unet")
        unet_config = FrozenDict(config)  # what `unet.config` is at save time
    result = check_diffusers(file, family, shapes, spec.pipeline_class, unet_config)
    if (family, layout) == ("flux", "kohya"):
        # diffusers' kohya FLUX.1 reader splits single_blocks linear1 at FLUX.1-dev's widths
        # (3072 / 12288): a tiny model's fused linear cannot go through it (real FLUX.1 can)
        assert not result["ok"] and "error" in result
        return
    assert result["ok"], result


def test_layer_shapes_are_logical_for_a_packed_quantized_weight():
    from lorastudio.training.export import base_weight_shapes

    class Packed(torch.nn.Module):  # what bitsandbytes' Linear4bit looks like: a packed weight
        def __init__(self) -> None:
            super().__init__()
            self.in_features, self.out_features = 8, 6
            self.weight = torch.nn.Parameter(torch.zeros(24, 1), requires_grad=False)

    model = torch.nn.Sequential(Packed(), torch.nn.Conv2d(6, 4, 3))
    assert base_weight_shapes(model) == {"0": (6, 8), "1": (4, 6, 3, 3)}


@pytest.mark.parametrize("layout", ["kohya", "diffusers"])
def test_at_flux1_dev_sizes_both_layouts_pass_diffusers_and_comfyui(layout):
    """FLUX.1-dev's real layer sizes (a model on the meta device: shapes, no memory): diffusers'
    kohya reader, which hard-codes these widths, reads the kohya file too."""
    from diffusers import FluxTransformer2DModel

    with torch.device("meta"):
        model = FluxTransformer2DModel(
            in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
            num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
            guidance_embeds=True, axes_dims_rope=(16, 56, 56),
        )  # fmt: skip
    shapes = {n: tuple(m.weight.shape) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    lora = _adapter(shapes, "flux", 16.0)
    file, header = file_for_layout(lora, "flux", layout, {"lorastudio.family": "flux"})
    assert check_comfyui(file, header, "flux", shapes)["ok"]
    result = check_diffusers(file, "flux", shapes, "FluxPipeline")
    assert result["ok"], result
    assert result["loaded"] == len(lora.tensors) + (76 if layout == "kohya" else 0)  # + proj_mlp zero parts


def _lora_on(shapes: dict[str, tuple[int, ...]]) -> PeftLora:
    """A random rank-RANK LoRA (alpha 16) on every linear layer of `shapes`."""
    g = torch.Generator().manual_seed(2)
    sd = {}
    for name, (rows, cols) in shapes.items():
        sd[f"{name}.lora_A.weight"] = torch.randn(RANK, cols, generator=g)  # [r, in]
        sd[f"{name}.lora_B.weight"] = torch.randn(rows, RANK, generator=g)  # [out, r]
    return PeftLora(sd, RANK, 16.0)


@pytest.mark.parametrize("family", ["flux2", "flux2-klein"])
def test_comfyui_maps_flux2s_diffusers_names_that_flux1s_table_covers(family, layer_shapes):
    """ComfyUI's FLUX.2 model is a Flux subclass, so FLUX.1's diffusers table (flux_to_diffusers)
    maps FLUX.2's attention / MLP / fused single-block names too (bench/comfyui_check.py ran
    ComfyUI v0.19.3 on such LyCORIS and diffusers files): the save-time check passes a diffusers
    FLUX.2 file of those layers and still names the shared modulations, which that table lacks."""
    shapes = {n: s for n, s in layer_shapes(family).items() if len(s) == 2}
    mapped = {n: s for n, s in shapes.items() if ".attn." in n or ".ff" in n}
    assert any(n.startswith("single_transformer_blocks.") for n in mapped)
    file, header = file_for_layout(_lora_on(mapped), family, "diffusers", {})
    check = check_comfyui(file, header, family, shapes)
    assert check["ok"], check
    modulation = {n: s for n, s in shapes.items() if "modulation" in n}
    assert modulation  # FLUX.2's shared modulations: not in ComfyUI's FLUX.1 table
    file, header = file_for_layout(_lora_on(modulation), family, "diffusers", {})
    check = check_comfyui(file, header, family, shapes)
    assert not check["ok"] and len(check["unconsumed"]) == 2 * len(modulation)


def test_diffusers_check_takes_doras_magnitudes_and_names_a_wrong_one(layer_shapes):
    """A diffusers-layout DoRA file: one `lora_magnitude_vector` per output row of each layer
    (diffusers hands it to peft's DoRA layer); a magnitude of the wrong length is named."""
    shapes = layer_shapes("flux")
    lora = _adapter(shapes, "flux", 16.0)
    file, _ = file_for_layout(lora, "flux", "diffusers", {})
    modules = sorted({k.removesuffix(".lora_A.weight") for k in file if k.endswith(".lora_A.weight")})
    rows = {m: file[m + ".lora_B.weight"].shape[0] for m in modules}
    dora = {**file, **{f"{m}.lora_magnitude_vector": torch.ones(rows[m]) for m in modules}}
    result = check_diffusers(dora, "flux", shapes, "FluxPipeline")
    assert result["ok"] and result["loaded"] == len(dora), result
    wrong = {**dora, f"{modules[0]}.lora_magnitude_vector": torch.ones(rows[modules[0]] + 1)}
    result = check_diffusers(wrong, "flux", shapes, "FluxPipeline")
    assert not result["ok"] and result["mismatched"] == [
        f"{modules[0]}.lora_magnitude_vector: ({rows[modules[0]] + 1},) vs layer "
        f"{shapes[modules[0].removeprefix('transformer.')]}"
    ]


def test_a_layer_diffusers_conversion_leaves_out_is_not_called_loaded(layer_shapes):
    """A FLUX.2 kohya file with a modulation layer (lora_targets may name it): diffusers' kohya
    FLUX.2 converter drops `lora_unet_double_stream_modulation_img_lin` with a logged warning,
    and the sidecar called diffusers ok (RELIABILITY 2245); now it names the layer left out."""
    shapes = layer_shapes("flux2")
    lora = _adapter(shapes, "flux2", 4.0)
    g = torch.Generator().manual_seed(2)
    out, inp = shapes["double_stream_modulation_img.linear"]
    lora.tensors["double_stream_modulation_img.linear.lora_A.weight"] = torch.randn(RANK, inp, generator=g)
    lora.tensors["double_stream_modulation_img.linear.lora_B.weight"] = torch.randn(out, RANK, generator=g)
    file, _ = file_for_layout(lora, "flux2", "kohya", {})
    result = check_diffusers(file, "flux2", shapes, "Flux2Pipeline")
    assert not result["ok"]
    assert result["dropped"] == [
        "transformer.double_stream_modulation_img.linear (left out by the conversion)"
    ]
    default, _ = file_for_layout(_adapter(shapes, "flux2", 4.0), "flux2", "kohya", {})
    assert check_diffusers(default, "flux2", shapes, "Flux2Pipeline")["ok"]
