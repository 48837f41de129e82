"""GPU: fp8 compute and int8 / nf4 quantised bases (training/planning/quantize.py) on CUDA: the real fp8
kernels against bf16 and against the emulated fp8 maths, the tiny models' conversion (fp8 falls
back per layer on dims that are not multiples of 16, with the reason), the real train() with
regional compile, and placement that never holds the whole bf16 model on the device.
Skipped without CUDA; run with `pytest -m gpu tests/gpu/test_quant_gpu.py`.

Tolerances: one fp8 layer vs bf16 within 8% (relative norm; e4m3 keeps 3 mantissa bits) and vs
the emulated fp8 maths within 1% (same casts, different accumulation); a 4-step train() run vs
its bf16 run: every loss within 3% (fp8, nf4) / 1% (int8).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lorastudio import families
from lorastudio.config import parse_train_config
from lorastudio.training.loop import train
from lorastudio.training.planning.quantize import (
    QuantisedLinear,
    apply_base_precision,
    base_weight_bytes,
    block_linears,
    fp8_linear,
    iter_quantised,
)
from lorastudio.training.precision import fp8_capable
from lorastudio.training.speed.compile import compile_state

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
DEV = torch.device("cuda")
BF16 = torch.bfloat16
needs_fp8 = pytest.mark.skipif(
    not torch.cuda.is_available() or not fp8_capable(DEV), reason="needs compute capability >= 8.9"
)
TRAIN_TOLERANCE = {"fp8": 0.03, "nf4": 0.03, "int8": 0.01}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def _out_and_grad(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x.grad = None
    y = layer(x)  # [B, L, out]
    y.float().square().mean().backward()
    return y.detach(), x.grad.clone()


@needs_fp8
def test_an_fp8_linear_runs_the_rowwise_kernels_and_matches_bf16():
    torch.manual_seed(0)
    linear = nn.Linear(1024, 3072, device=DEV, dtype=BF16).requires_grad_(False)  # dims % 16 == 0
    x = torch.randn(2, 512, 1024, device=DEV, dtype=BF16, requires_grad=True)  # [B, L, in]
    ref_y, ref_g = _out_and_grad(linear, x)
    layer = fp8_linear(linear)
    y, g = _out_and_grad(layer, x)
    x_cpu = x.detach().cpu().requires_grad_(True)  # the same layer on the CPU: the emulated maths
    emu_y, emu_g = (t.to(DEV) for t in _out_and_grad(copy.deepcopy(layer).to("cpu"), x_cpu))
    assert _rel(y, ref_y) < 0.08 and _rel(g, ref_g) < 0.08
    assert _rel(y, ref_y) > 1e-3  # really fp8
    assert _rel(y, emu_y) < 0.01 and _rel(g, emu_g) < 0.01  # the kernels compute the tested maths
    assert linear.weight.grad is None


@needs_fp8
def test_fp8_on_the_tiny_models_converts_what_it_can_and_says_what_it_cannot(tiny_model):
    flux = families.get("flux").load_denoiser(str(tiny_model("flux")), None, BF16, torch.device("cpu"))
    targets = len(block_linears(flux))
    assert apply_base_precision(flux, "fp8", DEV) == []  # every tiny FLUX.1 block dim is a multiple of 16
    assert len(list(iter_quantised(flux))) == targets > 0 and block_linears(flux) == []
    assert all(p.device.type == "cuda" for p in flux.parameters())
    z = families.get("z-image").load_denoiser(str(tiny_model("z-image")), None, BF16, torch.device("cpu"))
    assert apply_base_precision(z, "fp8", DEV) == [
        "fp8: 12 of 31 block linears kept in bf16 (dims not multiples of 16: 12)"
    ]


def _big_flux() -> nn.Module:
    """A FLUX.1 transformer of the real class, 1024 wide, 20 blocks (about 1.1 GB in bf16; its
    largest layer 13 MB), on the CPU."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=4, num_single_layers=16, attention_head_dim=128,
        num_attention_heads=8, joint_attention_dim=256, pooled_projection_dim=128,
        guidance_embeds=True, axes_dims_rope=(16, 56, 56),
    )  # fmt: skip
    return model.to(BF16).requires_grad_(False)


@pytest.mark.parametrize(("precision", "share"), [("nf4", 0.35), ("int8", 0.6)])
def test_quantising_onto_the_gpu_never_holds_the_whole_bf16_model(precision, share):
    """Resident after: the quantised blocks (<= `share` of bf16) on the GPU; peak: that plus one
    layer's quantisation scratch (bf16 copy, fp32 check, torchao's buffers: < 0.25 GB here)."""
    model = _big_flux()
    bf16_bytes = base_weight_bytes(model)
    swapped = model.single_transformer_blocks[-1]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(DEV)
    start = torch.cuda.memory_allocated(DEV)
    assert apply_base_precision(model, precision, DEV, stay_on_cpu=[swapped]) == []
    peak = torch.cuda.max_memory_allocated(DEV) - start
    resident = torch.cuda.memory_allocated(DEV) - start
    assert resident < share * bf16_bytes, (resident, bf16_bytes)
    assert peak < resident + 0.25e9 and peak < 0.75 * bf16_bytes, (peak, resident, bf16_bytes)
    for name, p in model.named_parameters():
        on = "cpu" if name.startswith("single_transformer_blocks.15.") else "cuda"
        assert p.device.type == on, name
    assert any(isinstance(m, QuantisedLinear) for m in swapped.modules())  # quantised, left in CPU RAM


def _train(family: str, precision: str, tiny_model, sample_dataset, name: str) -> tuple:
    spec = families.get(family).spec
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(sample_dataset),
        "output_name": name,
        "resolution": max(32, 2 * spec.resolution_multiple),
        "steps": 4,
        "batch_size": 2,
        "learning_rate": 1e-3,
        "base_precision": precision,
        "seed": 0,
    }
    if "max_sequence_length" in spec.supports:
        raw["max_sequence_length"] = 32
    events: list = []
    result = train(parse_train_config(raw), events.append, device="cuda", return_denoiser=True)
    (plan,) = [e for e in events if e.type == "plan_chosen"]
    return result, plan


@pytest.mark.parametrize("family", ["flux", "z-image"])
def test_train_with_quantised_and_fp8_bases_and_regional_compile(family, tiny_model, sample_dataset):
    ref, _ = _train(family, "bf16", tiny_model, sample_dataset, f"{family}-bf16")
    precisions = ["int8", "nf4"] + (["fp8"] if fp8_capable(DEV) else [])
    for precision in precisions:
        result, plan = _train(family, precision, tiny_model, sample_dataset, f"{family}-{precision}")
        assert plan.base_precision == precision and plan.compile
        state = compile_state(result.denoiser)
        assert state is not None and state.active, state and state.fallback_reason
        assert list(iter_quantised(result.denoiser))
        if family == "z-image" and precision in ("nf4", "fp8"):
            assert plan.fallbacks and "12 of 31 block linears kept in bf16" in plan.fallbacks[0]
        else:
            assert plan.fallbacks == []
        for got, want in zip(result.losses, ref.losses, strict=True):
            assert got == pytest.approx(want, rel=TRAIN_TOLERANCE[precision]), (
                precision,
                result.losses,
                ref.losses,
            )
        assert result.lora_path is not None and result.lora_path.exists()
