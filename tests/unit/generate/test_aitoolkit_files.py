"""ai-toolkit's LoKr files of a diffusers-model family (its default "peft format" since
`old_lokr_format` went off: FLUX.1 and FLUX.1 Kontext keep `transformer.`, its other families
rename it `diffusion_model.`): `transformer.<diffusers module>.lokr_w1 / lokr_w2(_a, _b) / alpha`.
ComfyUI maps `transformer.` + the diffusers name for every transformer family (its
`model_lora_keys_unet`, kept as tests/data/comfyui_key_map.json.gz); generation and `init_lora`
refused the file as "not layers of this FluxPipeline: is it another model's LoRA?"
(RELIABILITY 2240)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lorastudio import families
from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras
from lorastudio.generate.lycoris_names import Target, to_lycoris_names
from lorastudio.lora.lycoris import module_key

TABLE = json.loads(
    gzip.decompress((Path(__file__).parents[2] / "data" / "comfyui_key_map.json.gz").read_bytes())
)["families"]
TRANSFORMER_FAMILIES = sorted(f for f in TABLE if f != "sdxl")  # SDXL's U-Net: its own `unet.` spelling


@pytest.mark.parametrize("family", TRANSFORMER_FAMILIES)
def test_a_transformer_named_lycoris_layer_is_the_module_comfyui_patches(family):
    """Every `transformer.<name>` ComfyUI maps to a weight that it also maps from the LyCORIS
    spelling `lycoris_<name>` resolves to that same layer's key here (the layer generation and
    init_lora patch), for every transformer family's tiny model."""
    theirs = TABLE[family]
    pipeline_class = families.get(family).spec.pipeline_class
    pairs = {
        key: key.removeprefix("transformer.")
        for key, weight in theirs.items()
        if key.startswith("transformer.")
        and theirs.get(module_key(key.removeprefix("transformer."))) == weight
    }
    assert len(pairs) >= 20
    found = to_lycoris_names({key: {"lokr_w1": None} for key in pairs}, pipeline_class)
    assert {key: target for key, (target, _) in found.items()} == {
        key: Target((module_key(module),)) for key, module in pairs.items()
    }


def _weights(pipe) -> dict[str, torch.Tensor]:
    """The denoiser's own weights by their plain names (peft's wrappers' `base_layer.` taken out)."""
    state = pipe.transformer.state_dict()
    return {k.replace(".base_layer", ""): v.detach().clone() for k, v in state.items() if "lora_" not in k}


def _aitoolkit_lokr(pipe, modules: list[str], rank: int) -> dict[str, torch.Tensor]:
    """ai-toolkit's peft-format LoKr (toolkit/network_mixins.get_state_dict, lora_special's
    alpha = lora_dim there): w1 full [2, 2], w2 low-rank [out / 2, r] @ [r, in / 2]."""
    g = torch.Generator().manual_seed(3)
    tensors = {}
    for name in modules:
        out, inp = pipe.transformer.get_submodule(name).weight.shape
        tensors |= {
            f"transformer.{name}.lokr_w1": torch.randn(2, 2, generator=g),
            f"transformer.{name}.lokr_w2_a": 0.3 * torch.randn(out // 2, rank, generator=g),
            f"transformer.{name}.lokr_w2_b": 0.3 * torch.randn(rank, inp // 2, generator=g),
            f"transformer.{name}.alpha": torch.tensor(float(rank)),
        }
    return tensors


def test_an_aitoolkit_flux_lokr_file_renders_at_its_strength(flux_pipe, tmp_path):
    """The file patches each named layer by kron(w1, w2_a @ w2_b) x alpha / rank (ComfyUI's LoKr
    rule, computed here by hand), half of it at strength 0.5; no other weight moves."""
    modules = [
        "transformer_blocks.0.attn.to_q",
        "transformer_blocks.0.ff.net.2",
        "single_transformer_blocks.1.proj_mlp",
    ]
    apply_loras(flux_pipe, [])
    base = _weights(flux_pipe)
    tensors = _aitoolkit_lokr(flux_pipe, modules, rank=4)
    path = tmp_path / "aitoolkit-lokr.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt", "software": json.dumps({"name": "ai-toolkit"})})
    want = {
        f"{m}.weight": torch.kron(
            tensors[f"transformer.{m}.lokr_w1"],
            tensors[f"transformer.{m}.lokr_w2_a"] @ tensors[f"transformer.{m}.lokr_w2_b"],
        )  # [out, in]; alpha / rank = 1
        for m in modules
    }
    for strength in (1.0, 0.5):
        apply_loras(flux_pipe, [(path, strength)])
        now = _weights(flux_pipe)
        for key, weight in base.items():
            change = now[key] - weight
            expected = strength * want[key] if key in want else torch.zeros_like(weight)
            torch.testing.assert_close(change, expected, rtol=1e-5, atol=1e-6, msg=key)
    assert max(w.abs().max().item() for w in want.values()) > 0.1
    apply_loras(flux_pipe, [])
    assert _weights(flux_pipe).keys() == base.keys()
    assert all(torch.equal(_weights(flux_pipe)[k], v) for k, v in base.items())


def test_an_aitoolkit_dora_file_renders_as_its_dora_not_its_plain_lora(flux_pipe, tmp_path):
    """ai-toolkit's DoRA (`transformer.<module>.lora_A / lora_B / magnitude`, scale 1): diffusers'
    loader dropped `.magnitude` without a word and the file rendered as its plain LoRA
    (RELIABILITY 2241). Each layer is now m (W + B A) / ||W + B A|| per output row (DoRA's rule,
    ai-toolkit's DoRAModule.apply_dora; computed here by hand), half-way at strength 0.5."""
    modules = ["transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.proj_mlp"]
    apply_loras(flux_pipe, [])
    base = _weights(flux_pipe)
    g = torch.Generator().manual_seed(4)
    tensors, want = {}, {}
    for m in modules:
        w = base[f"{m}.weight"]  # [out, in]
        a, b = 0.2 * torch.randn(4, w.shape[1], generator=g), 0.2 * torch.randn(w.shape[0], 4, generator=g)
        magnitude = w.norm(dim=1) * (1 + 0.5 * torch.rand(w.shape[0], generator=g))  # [out]
        tensors |= {f"transformer.{m}.lora_A.weight": a, f"transformer.{m}.lora_B.weight": b}
        tensors[f"transformer.{m}.magnitude"] = magnitude
        merged = w + b @ a  # [out, in]
        want[f"{m}.weight"] = magnitude[:, None] * merged / merged.norm(dim=1, keepdim=True)
    path = tmp_path / "aitoolkit-dora.safetensors"
    save_file(tensors, str(path))
    for strength in (1.0, 0.5):
        apply_loras(flux_pipe, [(path, strength)])
        now = _weights(flux_pipe)
        for key, weight in base.items():
            expected = weight + strength * (want[key] - weight) if key in want else weight
            torch.testing.assert_close(now[key], expected, rtol=1e-5, atol=1e-5, msg=key)
    plain = {key: base[key] + tensors[f"transformer.{key.removesuffix('.weight')}.lora_B.weight"]
             @ tensors[f"transformer.{key.removesuffix('.weight')}.lora_A.weight"] for key in want}  # fmt: skip
    assert min((want[k] - plain[k]).abs().max().item() for k in want) > 1e-2  # not the plain LoRA
    apply_loras(flux_pipe, [])
    assert _weights(flux_pipe).keys() == base.keys()
    assert all(torch.equal(_weights(flux_pipe)[k], v) for k, v in base.items())


def test_a_diffusers_named_tensor_no_loader_reads_is_refused_naming_it(flux_pipe, tmp_path):
    """A `transformer.` tensor that is no LoRA / DoRA part (here a `.scale`) was dropped by
    diffusers' loader with the rest of the file rendered; now refused, naming it."""
    w = flux_pipe.transformer.transformer_blocks[0].attn.to_q.weight
    path = tmp_path / "odd.safetensors"
    save_file(
        {
            "transformer.transformer_blocks.0.attn.to_q.lora_A.weight": torch.ones(4, w.shape[1]),
            "transformer.transformer_blocks.0.attn.to_q.lora_B.weight": torch.ones(w.shape[0], 4),
            "transformer.transformer_blocks.0.attn.to_q.scale": torch.ones(w.shape[0]),
        },
        str(path),
    )
    with pytest.raises(ModelSourceError, match=r"to_q\.scale' is no tensor of a LoRA or DoRA layer"):
        apply_loras(flux_pipe, [(path, 1.0)])
    assert not flux_pipe.get_list_adapters()


def test_an_aitoolkit_chroma_file_loads_every_layer_its_approximators_too(tiny_model, tmp_path):
    """ai-toolkit's Chroma LoRA (`diffusion_model.<checkpoint name>.lora_A / lora_B`, every linear
    of its Chroma model: fused qkv / linear1 with one down matrix, the approximator's
    `layers.N.in_layer` ...) matched no layer of ChromaPipeline (diffusers' FLUX.1 reader converts
    none of that spelling; RELIABILITY 2243). Each diffusers layer now holds its rows of the
    layer's change, B_rows @ A (no alpha: scale 1), computed here by hand."""
    from lorastudio.generate import load_pipeline

    pipe = load_pipeline(str(tiny_model("chroma")), "chroma", device="cpu")
    t = pipe.transformer
    single = [f"single_transformer_blocks.0.attn.to_{p}" for p in "qkv"] + [
        "single_transformer_blocks.0.proj_mlp"
    ]
    layers = {
        "double_blocks.0.img_attn.qkv": [f"transformer_blocks.0.attn.to_{p}" for p in "qkv"],
        "single_blocks.0.linear1": single,
        "double_blocks.0.img_mlp.0": ["transformer_blocks.0.ff.net.0.proj"],
        "distilled_guidance_layer.in_proj": ["distilled_guidance_layer.in_proj"],
        "distilled_guidance_layer.layers.1.out_layer": ["distilled_guidance_layer.layers.1.linear_2"],
    }
    g = torch.Generator().manual_seed(6)
    tensors, want = {}, {}
    for native, modules in layers.items():
        rows = [t.get_submodule(m).weight.shape[0] for m in modules]
        a = torch.randn(4, t.get_submodule(modules[0]).weight.shape[1], generator=g)  # [r, in]
        b = torch.randn(sum(rows), 4, generator=g)  # [out of the fused linear, r]
        tensors |= {
            f"diffusion_model.{native}.lora_A.weight": a,
            f"diffusion_model.{native}.lora_B.weight": b,
        }
        want |= {m: part @ a for m, part in zip(modules, b.split(rows), strict=True)}  # [out, in]
    path = tmp_path / "aitoolkit-chroma.safetensors"
    save_file(tensors, str(path), metadata={"ss_base_model_version": "chroma"})
    apply_loras(pipe, [(path, 1.0)])
    for module, delta in want.items():
        got = t.get_submodule(module).get_delta_weight("lorastudio_0")
        torch.testing.assert_close(got, delta, rtol=1e-5, atol=1e-5, msg=module)


@pytest.mark.parametrize("spelling", ["diffusion_model", "lora_unet"])
def test_a_flux2_file_of_every_linear_loads_each_layer_as_comfyui_does(tiny_model, tmp_path, spelling):
    """FLUX.2 LoRAs of every linear (ai-toolkit's target_lora_modules ["Flux2"], saved
    `diffusion_model.<BFL name>.lora_A / lora_B`; the same layers under kohya's `lora_unet_` with
    lora_down / lora_up / alpha): diffusers' kohya converter dropped the modulation layer with a
    logged warning, its `diffusion_model.` one loaded the final adaLN's change with its (shift,
    scale) halves unswapped (RELIABILITY 2244). Each layer now holds the change ComfyUI patches
    onto its checkpoint weight, by hand: B @ A x alpha / rank, the final adaLN's rows swapped
    into diffusers' (scale, shift) order."""
    from lorastudio.generate import load_pipeline

    pipe = load_pipeline(str(tiny_model("flux2")), "flux2", device="cpu")
    t = pipe.transformer
    layers = {
        "double_blocks.0.img_attn.proj": "transformer_blocks.0.attn.to_out.0",
        "double_stream_modulation_img.lin": "double_stream_modulation_img.linear",
        "final_layer.adaLN_modulation.1": "norm_out.linear",
    }
    g = torch.Generator().manual_seed(7)
    tensors, want = {}, {}
    for native, module in layers.items():
        out, inp = t.get_submodule(module).weight.shape
        a, b = torch.randn(4, inp, generator=g), torch.randn(out, 4, generator=g)  # [r, in], [out, r]
        if spelling == "lora_unet":
            key = "lora_unet_" + native.replace(".", "_")
            tensors |= {
                f"{key}.lora_down.weight": a,
                f"{key}.lora_up.weight": b,
                f"{key}.alpha": torch.tensor(2.0),
            }
            scale = 2.0 / 4
        else:
            tensors |= {
                f"diffusion_model.{native}.lora_A.weight": a,
                f"diffusion_model.{native}.lora_B.weight": b,
            }
            scale = 1.0
        delta = b @ a * scale  # [out, in] on the checkpoint's weight
        want[module] = torch.cat(delta.chunk(2)[::-1]) if native.startswith("final_layer.adaLN") else delta
    path = tmp_path / f"flux2-{spelling}.safetensors"
    save_file(tensors, str(path))
    apply_loras(pipe, [(path, 1.0)])
    for module, delta in want.items():
        got = t.get_submodule(module).get_delta_weight("lorastudio_0")
        torch.testing.assert_close(got, delta, rtol=1e-5, atol=1e-5, msg=module)


def test_a_kohya_chroma_file_of_approximator_layers_loads_them(tiny_model, tmp_path):
    """A kohya-named Chroma file with approximator layers (`lora_unet_distilled_guidance_layer_…`,
    ComfyUI's native names, which ComfyUI loads): diffusers' kohya FLUX.1 converter refused the file
    ("Incompatible keys detected": a `lora_unet_` key it does not map; RELIABILITY 2246). Now read
    by lorastudio's reader: each layer at alpha / rank, as computed here by hand."""
    from lorastudio.generate import load_pipeline

    pipe = load_pipeline(str(tiny_model("chroma")), "chroma", device="cpu")
    t = pipe.transformer
    layers = {
        "lora_unet_double_blocks_0_img_attn_proj": "transformer_blocks.0.attn.to_out.0",
        "lora_unet_distilled_guidance_layer_layers_0_in_layer": "distilled_guidance_layer.layers.0.linear_1",
        "lora_unet_distilled_guidance_layer_out_proj": "distilled_guidance_layer.out_proj",
    }
    g = torch.Generator().manual_seed(8)
    tensors, want = {}, {}
    for key, module in layers.items():
        out, inp = t.get_submodule(module).weight.shape
        a, b = torch.randn(4, inp, generator=g), torch.randn(out, 4, generator=g)  # [r, in], [out, r]
        tensors |= {
            f"{key}.lora_down.weight": a,
            f"{key}.lora_up.weight": b,
            f"{key}.alpha": torch.tensor(8.0),
        }
        want[module] = b @ a * (8.0 / 4)
    path = tmp_path / "kohya-chroma.safetensors"
    save_file(tensors, str(path))
    apply_loras(pipe, [(path, 1.0)])
    for module, delta in want.items():
        got = t.get_submodule(module).get_delta_weight("lorastudio_0")
        torch.testing.assert_close(got, delta, rtol=1e-5, atol=1e-5, msg=module)
