"""Diffusers-named LoRA files with a per-layer `.alpha` (`transformer.<module>.lora_A.weight` /
`.lora_B.weight` beside `transformer.<module>.alpha`: TheLastBen's FLUX trainer, which diffusers'
FLUX.1 reader names; ComfyUI applies each layer at alpha / rank) are applied by generation and
read by `lora convert` at alpha / rank, for every family.

Before (RELIABILITY 890): generation refused them for SDXL ("Invalid LoRA checkpoint. Make sure
all LoRA param names contain `'lora'` substring"), Qwen-Image / Z-Image (peft's "Target modules
{every module of the file} not found"), FLUX.2 and Krea 2; convert, merge, resize and
assistant_lora refused them for every family ("not a diffusers or kohya LoRA of a denoiser")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from bench.foreign_lora_audit import effective as effective_weights
from safetensors.torch import load_file, save_file

from lorastudio import families
from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras
from lorastudio.lora.files import convert_file, denoiser_prefix
from lorastudio.tiny import build_tiny_pipeline

RANK, ALPHA = 4, 8.0  # scale alpha / rank = 2: a lost alpha shows as half the change


def _layers(pipe, family: str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """A random rank-4 LoRA {module: (A [r, in], B [out, r])} on the family's default targets."""
    spec = families.get(family).spec
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, module in getattr(pipe, spec.denoiser).named_modules():
        if isinstance(module, torch.nn.Linear) and any(name.endswith("." + t) for t in spec.lora_targets):
            a = torch.randn(RANK, module.in_features, generator=g) * 0.3
            out[name] = (a, torch.randn(module.out_features, RANK, generator=g) * 0.3)
    return out


def _files(pipe, family: str, folder: Path) -> tuple[Path, Path]:
    """(the file with `.alpha` tensors, the same change with alpha / rank folded into lora_B and no
    alpha: diffusers' own reading of it is the reference)."""
    prefix = denoiser_prefix(family)
    theirs, folded = {}, {}
    for name, (a, b) in _layers(pipe, family).items():
        theirs |= {f"{prefix}.{name}.lora_A.weight": a, f"{prefix}.{name}.lora_B.weight": b}
        theirs[f"{prefix}.{name}.alpha"] = torch.tensor(ALPHA)
        folded |= {f"{prefix}.{name}.lora_A.weight": a, f"{prefix}.{name}.lora_B.weight": b * ALPHA / RANK}
    save_file(theirs, str(folder / "theirs.safetensors"))
    save_file(folded, str(folder / "folded.safetensors"))
    return folder / "theirs.safetensors", folder / "folded.safetensors"


@pytest.mark.parametrize("family", ["sdxl", "qwen-image", "z-image", "flux2", "krea2"])
def test_a_file_with_layer_alphas_generates_at_alpha_over_rank(family, tmp_path):
    pipe = build_tiny_pipeline(family)
    names = list(_layers(pipe, family))
    theirs, folded = _files(pipe, family, tmp_path)
    base = effective_weights(pipe, family, names)
    apply_loras(pipe, [(folded, 0.7)])
    want = effective_weights(pipe, family, names)
    apply_loras(pipe, [(theirs, 0.7)])
    got = effective_weights(pipe, family, names)
    for name in names:
        assert not torch.allclose(want[name], base[name]), name
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5, msg=name)
    apply_loras(pipe, [])
    for name, weight in effective_weights(pipe, family, names).items():
        torch.testing.assert_close(weight, base[name], rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", ["flux", "qwen-image"])
def test_lora_convert_reads_layer_alphas(family, tmp_path):
    pipe = build_tiny_pipeline(family)
    theirs, folded = _files(pipe, family, tmp_path)
    out = tmp_path / "out.safetensors"
    convert_file(theirs, out, "diffusers", family)
    got, want = load_file(str(out)), load_file(str(folded))
    assert got.keys() == want.keys()
    for key, value in want.items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)


def test_layer_alphas_beside_an_adapter_config_alpha_are_refused(tmp_path):
    """Two alphas for one layer (the tensors' and lora_adapter_metadata's): refused naming both."""
    pipe = build_tiny_pipeline("qwen-image")
    theirs, _ = _files(pipe, "qwen-image", tmp_path)
    both = tmp_path / "both.safetensors"
    config = {"transformer.r": RANK, "transformer.lora_alpha": ALPHA}
    save_file(load_file(str(theirs)), str(both), {"lora_adapter_metadata": json.dumps(config)})
    with pytest.raises(ModelSourceError, match="alpha twice") as err:
        apply_loras(pipe, [(both, 1.0)])
    assert str(both) in str(err.value)
    with pytest.raises(ModelSourceError, match="alpha twice"):
        convert_file(both, tmp_path / "out.safetensors", "diffusers", "qwen-image")


def test_an_assistant_lora_with_layer_alphas_merges_at_alpha_over_rank(tmp_path):
    """A run's assistant_lora (merged into the base weights before training) read the same way."""
    from types import SimpleNamespace

    from lorastudio.training.adapters.assistant import merge_assistant

    pipe = build_tiny_pipeline("qwen-image")
    layers = _layers(pipe, "qwen-image")
    theirs, _ = _files(pipe, "qwen-image", tmp_path)
    model = pipe.transformer
    base = {name: model.get_submodule(name).weight.detach().clone() for name in layers}
    cfg = SimpleNamespace(assistant_lora=str(theirs))  # merge_assistant reads this field alone
    info = merge_assistant(model, cfg, families.get("qwen-image"))  # type: ignore[arg-type]
    assert info is not None and info["layers"] == len(layers)
    for name, (a, b) in layers.items():
        got = model.get_submodule(name).weight - base[name]
        torch.testing.assert_close(got, b @ a * ALPHA / RANK, rtol=1e-4, atol=1e-5, msg=name)
