"""The save-time loader check of a run on an fp8 base (RELIABILITY 1500): an fp8 base's block
linears (training/speed/fp8.Fp8FrozenLinear) hold their weight as two e4m3 copies and scales, `weight`
a property, no parameter, so the denoiser's module shapes the check reads
(export.base_weight_shapes) left them out, and every `base_precision = "fp8"` run was told that
ComfyUI and diffusers would not load its file (every block key "unknown" / "unconsumed"; the CLI
printed both warnings, the hub card named no loader), although the file is a plain LoRA of the
bf16 base's layers. Found by the session 37 portable-LoRA audit (fp8 emulated on the CPU:
quantize.apply_base_precision's fp8_emulate)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tests.unit.lora.portable_cells import linear_weights
from tests.unit.lora.test_files import FLUX_DOUBLE_ONLY

from lorastudio import families
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import file_for_layout
from lorastudio.lora.portability import check_loaders
from lorastudio.training import precision
from lorastudio.training.adapters.export import base_weight_shapes
from lorastudio.training.adapters.lora import add_lora, lora_config_for, lora_state_dict
from lorastudio.training.planning import quantize
from lorastudio.training.speed.fp8 import Fp8FrozenLinear

CPU = torch.device("cpu")


def _denoiser(model: Path, fp8: bool) -> torch.nn.Module:
    fam = families.get("flux")
    denoiser = fam.load_denoiser(str(model), None, torch.bfloat16, CPU)
    if fp8:
        assert quantize.apply_base_precision(denoiser, "fp8", CPU, fp8_emulate=True) == []
    return denoiser


def test_an_fp8_bases_layers_keep_their_shapes_and_its_file_passes_the_loader_check(tiny_model):
    cfg = SimpleNamespace(lora_rank=4, lora_alpha=8.0, lora_dropout=0.0, lora_targets=None)
    spec = families.get("flux").spec
    shapes = {}
    for fp8 in (False, True):
        denoiser = _denoiser(tiny_model("flux"), fp8)
        torch.manual_seed(0)
        add_lora(denoiser, lora_config_for(cfg, spec.lora_targets))
        shapes[fp8] = base_weight_shapes(denoiser)
    assert any(isinstance(m, Fp8FrozenLinear) for m in denoiser.modules())
    assert shapes[True] == shapes[False]
    for module in denoiser.modules():  # a trained change, so the strength checks see one
        if hasattr(module, "lora_B"):
            torch.nn.init.normal_(module.lora_B["default"].weight)
    lora = PeftLora(lora_state_dict(denoiser), cfg.lora_rank, cfg.lora_alpha)
    for layout in ("diffusers", "kohya"):
        tensors, header = file_for_layout(lora, "flux", layout, {"lorastudio.family": "flux"})
        loaders = check_loaders(tensors, header, "flux", shapes[True], spec.pipeline_class)
        assert loaders["comfyui"]["ok"], json.dumps(loaders["comfyui"])[:1500]
        if layout == "diffusers":  # (the kohya FLUX.1 reader of diffusers wants FLUX.1-dev's widths)
            assert loaders["diffusers"]["ok"], json.dumps(loaders["diffusers"])[:1500]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["diffusers", "kohya"])
def test_an_fp8_runs_file_loads_at_its_trained_strength(make_config, tiny_model, monkeypatch, layout):
    """A whole train() on an fp8 base (emulated on the CPU): the sidecar says ComfyUI (and, in the
    diffusers layout, diffusers) load the file, and generation's apply_loras of it at 1.0 and 0.5
    moves each trained layer of the plain base by that fraction of the adapter's own B @ A x scale."""
    from lorastudio.generate.pipeline import apply_loras, load_pipeline
    from lorastudio.training.loop import train

    convert = quantize.apply_base_precision
    monkeypatch.setattr(
        quantize, "apply_base_precision", lambda *a, **k: convert(*a, **{**k, "fp8_emulate": True})
    )
    monkeypatch.setattr(precision, "_fp8_problems", lambda device: [])
    events: list = []
    # diffusers' kohya FLUX.1 reader wants FLUX.1-dev's single-block widths: the double blocks only
    over = {"lora_targets": FLUX_DOUBLE_ONLY} if layout == "kohya" else {}
    cfg = make_config(
        "flux", output_name=f"fp8-{layout}", base_precision="fp8", lora_format=layout, steps=3,
        learning_rate=5e-2, **over,
    )  # fmt: skip
    result = train(cfg, events.append, device="cpu", return_denoiser=True)
    (plan,) = [e for e in events if e.type == "plan_chosen"]
    assert plan.base_precision == "fp8" and plan.fallbacks == []
    assert any(isinstance(m, Fp8FrozenLinear) for m in result.denoiser.modules())
    loaders = json.loads(result.lora_path.with_suffix(".json").read_text())["loaders"]
    assert loaders["comfyui"]["ok"], json.dumps(loaders["comfyui"])[:1500]
    assert loaders["diffusers"]["ok"] or layout == "kohya", json.dumps(loaders["diffusers"])[:1500]
    trained = {
        f"{name}.weight": module.get_delta_weight("default").detach().float()  # [out, in]
        for name, module in result.denoiser.named_modules()
        if hasattr(module, "lora_B") and "default" in module.lora_B
    }
    pipe = load_pipeline(str(tiny_model("flux")), "flux", dtype=torch.float32, device="cpu")
    base = linear_weights(pipe.transformer)
    for strength in (1.0, 0.5):
        apply_loras(pipe, [(result.lora_path, strength)])
        loaded = linear_weights(pipe.transformer)  # each layer as its forward applies it
        for name, weight in loaded.items():
            want = strength * trained[name] if name in trained else torch.zeros_like(weight)
            scale = float(trained[name].abs().max()) if name in trained else 1.0
            assert torch.allclose(weight - base[name], want, atol=1e-5 * scale), name
