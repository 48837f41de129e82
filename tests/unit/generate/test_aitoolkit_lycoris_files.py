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
    modules = ["transformer_blocks.0.attn.to_q", "transformer_blocks.0.ff.net.2", "single_transformer_blocks.1.proj_mlp"]
    apply_loras(flux_pipe, [])
    base = {k: v.detach().clone() for k, v in flux_pipe.transformer.state_dict().items()}
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
        now = flux_pipe.transformer.state_dict()
        for key, weight in base.items():
            change = now[key] - weight
            expected = strength * want[key] if key in want else torch.zeros_like(weight)
            torch.testing.assert_close(change, expected, rtol=1e-5, atol=1e-6, msg=key)
    assert max(w.abs().max().item() for w in want.values()) > 0.1
    apply_loras(flux_pipe, [])
    assert all(torch.equal(flux_pipe.transformer.state_dict()[k], v) for k, v in base.items())
