"""Quantised (int8 / nf4) and fp8 frozen bases (training/planning/quantize.py) on the real tiny models: what
is converted and what stays bf16, stored bytes, numerics against bf16, what autograd keeps for
the backward, LoRA training on top (gradients only on LoRA, losses close to bf16), the saved LoRA
on the plain pipeline, regional compile on top, and the never-fatal fallbacks.

Tolerances (measured on these models, then given a margin of 3-10x): one layer's output and
input gradient vs bf16 within 2% (int8, per-row scales), 15% (nf4, 4-bit codes), 8% (fp8 e4m3)
in relative norm. A 4-step LoRA run vs the bf16 run: every loss within 0.2% (int8) / 0.5% (nf4,
fp8) (measured <= 0.05%: the loss is dominated by the noise target), the first step's LoRA
gradient at cosine >= 0.995 (int8) / 0.95 (nf4) / 0.98 (fp8) (measured 0.999 / 0.978 / 0.995),
and the loss falls by 0.8-1.25x what bf16's falls (measured 0.98-1.05x). A 3-step train() run
(lr 5e-2, the sample dataset) vs its bf16 run: every loss within 1% (int8) / 2.5% (nf4)
(measured <= 0.1% / 0.9%): those runs are in test_quantize_train.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.noise import make_objective
from lorastudio.training.planning.quantize import (
    QuantisedLinear,
    Unsupported,
    apply_base_precision,
    base_weight_bytes,
    block_linears,
    fp8_linear,
    iter_quantised,
    nf4_scaler_block,
    place,
    quantise_weight,
)
from lorastudio.training.speed.compile import compile_denoiser, compile_state
from lorastudio.training.step import forward_backward

CPU = torch.device("cpu")
BF16 = torch.bfloat16
LAYER_TOLERANCE = {"int8": 0.02, "nf4": 0.15, "fp8": 0.08}
LOSS_TOLERANCE = {"int8": 0.002, "nf4": 0.005, "fp8": 0.005}
GRAD_COSINE = {"int8": 0.995, "nf4": 0.95, "fp8": 0.98}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def _saved_by_forward(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    return y, saved


def _layer_and_input(out_f: int = 128, in_f: int = 256) -> tuple[nn.Linear, torch.Tensor]:
    torch.manual_seed(0)
    linear = nn.Linear(in_f, out_f, dtype=BF16).requires_grad_(False)
    x = torch.randn(3, 20, in_f, dtype=BF16, requires_grad=True)  # [B, L, in]
    return linear, x


def _out_and_grad(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    x.grad = None
    y, saved = _saved_by_forward(layer, x)  # [B, L, out]
    y.float().square().sum().backward()
    return y.detach(), x.grad.clone(), saved


# -- one layer --------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["int8", "nf4"])
def test_a_quantised_linear_matches_bf16_and_keeps_only_its_quantised_weight(precision):
    linear, x = _layer_and_input()
    ref_y, ref_grad, _ = _out_and_grad(linear, x)
    layer = QuantisedLinear.from_linear(linear, quantise_weight(linear.weight.detach(), precision))
    y, grad, saved = _out_and_grad(layer, x)
    assert _rel(y, ref_y) < LAYER_TOLERANCE[precision]
    assert _rel(grad, ref_grad) < LAYER_TOLERANCE[precision]
    assert [type(t) for t in saved] == [type(layer.weight)]  # no input, no dequantised bf16 weight
    assert type(layer.weight).__name__ == {"int8": "Int8Tensor", "nf4": "NF4Tensor"}[precision]
    assert layer.weight.grad is None and layer.bias.grad is None


def test_an_fp8_linear_matches_bf16_without_saving_its_input_or_a_weight_gradient():
    linear, x = _layer_and_input()
    ref_y, ref_grad, _ = _out_and_grad(linear, x)
    layer = fp8_linear(linear)  # on the CPU: fp8 casts, matmuls emulated in fp32
    y, grad, saved = _out_and_grad(layer, x)
    assert _rel(y, ref_y) < LAYER_TOLERANCE["fp8"] and _rel(grad, ref_grad) < LAYER_TOLERANCE["fp8"]
    assert _rel(y, ref_y) > 1e-3  # really fp8: not the bf16 result
    assert isinstance(layer, torch.nn.Linear) and not any(p.requires_grad for p in layer.parameters())
    assert linear.weight.grad is None
    assert saved and all(t.dtype == torch.float8_e4m3fn or t.numel() <= 256 for t in saved)  # no input
    assert base_weight_bytes(layer) <= 1.1 * base_weight_bytes(linear)  # two e4m3 copies ~ one bf16
    from torchao.float8 import Float8LinearConfig
    from torchao.float8.float8_linear import Float8Linear

    config = Float8LinearConfig.from_recipe_name("rowwise")
    torchao_layer = Float8Linear.from_float(copy.deepcopy(linear), config=replace(config, emulate=True))
    _, _, torchao_saved = _out_and_grad(torchao_layer, x)
    assert any(t.shape == x.shape for t in torchao_saved)  # torchao's own layer keeps the input


def test_layers_a_format_cannot_hold_are_refused_with_the_reason():
    linear, _ = _layer_and_input(out_f=85, in_f=32)
    with pytest.raises(Unsupported, match="multiples of 16"):
        fp8_linear(linear)
    with pytest.raises(Unsupported, match="64-weight nf4 block"):
        quantise_weight(linear.weight.detach(), "nf4")  # 2720 weights
    assert nf4_scaler_block(3072 * 3072) == 256 and nf4_scaler_block(32 * 96) == 16
    with pytest.raises(Unsupported, match="group their scales"):
        nf4_scaler_block(64 * 12)  # 12 blocks: groups of 4 at most
    bad = linear.weight.detach().clone()
    bad[0, 0] = float("inf")
    with pytest.raises(Unsupported, match="not finite"):
        quantise_weight(bad, "int8")


# -- whole denoisers --------------------------------------------------------------------------------


def _denoiser(family: str, model_dir: Path) -> nn.Module:
    fam = families.get(family)
    return fam.load_denoiser(str(model_dir), None, BF16, CPU)


@pytest.mark.parametrize("family", ["flux", "sdxl", "qwen-image", "z-image"])
@pytest.mark.parametrize("precision", ["int8", "nf4"])
def test_the_block_linears_are_quantised_and_shrink(family, precision, tiny_model):
    plain = _denoiser(family, tiny_model(family))
    model = _denoiser(family, tiny_model(family))
    targets = [name for name, _ in block_linears(model)]
    reasons = apply_base_precision(model, precision, CPU)
    converted = dict(iter_quantised(model))
    assert converted and set(converted) <= set(targets)
    if family == "z-image" and precision == "nf4":  # its 85-wide MLPs: 2720 weights, not 64-blocks
        assert reasons == [
            "nf4: 12 of 31 block linears kept in bf16 (size not a multiple of the 64-weight nf4 block: 12)"
        ]
    else:
        assert reasons == [] and set(converted) == set(targets)
    apply_base_precision(model, precision, CPU)  # again: converted layers are left as they are
    assert dict(iter_quantised(model)) == converted
    plain_mods = dict(plain.named_modules())
    before = sum(base_weight_bytes(plain_mods[n]) for n in converted)
    after = sum(base_weight_bytes(m) for m in converted.values())
    assert after < {"int8": 0.6, "nf4": 0.35}[precision] * before
    assert base_weight_bytes(model) < base_weight_bytes(plain)
    untouched = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in converted]
    assert all(type(dict(model.named_modules())[n]) is nn.Linear for n in untouched)
    assert all(dict(model.named_modules())[n].weight.dtype == BF16 for n in untouched)
    embedders = {"flux": "x_embedder", "sdxl": "time_embedding.linear_1", "qwen-image": "img_in"}
    if family in embedders:
        assert embedders[family] in untouched  # embedders and proj_out stay in the compute dtype
        assert family == "sdxl" or "proj_out" in untouched


def test_placement_keeps_the_stay_on_cpu_blocks_in_cpu_ram(tiny_model):
    model = _denoiser("flux", tiny_model("flux"))
    last = model.single_transformer_blocks[-1]
    meta = torch.device("meta")  # a second device this CPU host has: where the rest must go
    place(model, meta, [last])
    for name, p in model.named_parameters():
        expected = "cpu" if name.startswith("single_transformer_blocks.1.") else "meta"
        assert p.device.type == expected, name


# -- LoRA training on a quantised base --------------------------------------------------------------


@dataclass
class MiniRun:
    """A few LoRA steps on one fixed batch: the real loader, precision, add_lora, objective and
    forward_backward, AdamW on the LoRA parameters."""

    losses: list[float]
    first_grads: dict[str, torch.Tensor]  # LoRA parameter name -> its gradient of step 1
    denoiser: nn.Module
    params: list[nn.Parameter]
    cfg: TrainConfig
    reasons: list[str]


def _cfg(family: str, model_dir: Path, precision: str) -> TrainConfig:
    extra = {"max_sequence_length": 16} if "max_sequence_length" in families.get(family).spec.supports else {}
    cfg = TrainConfig(
        family=family, base_model=str(model_dir), data_dir="unused", lora_rank=4, lora_alpha=4.0,
        learning_rate=1e-2, base_precision=precision, output_name="q", **extra,
    )  # fmt: skip
    return cfg


def _batch(family: str, model_dir: Path, cfg: TrainConfig) -> tuple[torch.Tensor, dict, dict]:
    fam = families.get(family)
    spec = fam.spec
    encoders = fam.load_text_encoders(str(model_dir), None, torch.float32, CPU)
    conds = fam.encode_prompts(encoders, ["a red circle", "a blue square"], cfg)
    cond = fam.collate_conditioning(conds)
    size = max(32, 2 * spec.resolution_multiple)
    side = size // spec.vae_scale_factor
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(2, spec.latent_channels, side, side, generator=g).to(BF16)  # [B, C, h, w]
    info = {"original_size": [(size, size)] * 2, "crop_top_left": [(0, 0)] * 2, "target_size": (size, size)}
    return latents, cond, info


_BATCHES: dict[str, tuple] = {}


def _mini_run(family: str, model_dir: Path, precision: str, steps: int = 4, **apply: Any) -> MiniRun:
    fam = families.get(family)
    cfg = _cfg(family, model_dir, precision)
    if family not in _BATCHES:
        _BATCHES[family] = _batch(family, model_dir, cfg)
    latents, cond, info = _BATCHES[family]
    denoiser = _denoiser(family, model_dir)
    reasons = apply_base_precision(denoiser, precision, CPU, **apply) if precision != "bf16" else []
    torch.manual_seed(0)
    params = add_lora(denoiser, lora_config_for(cfg, fam.spec.lora_targets))
    denoiser.train()
    objective = make_objective(fam, cfg, fam.scheduler_config(str(model_dir), None))
    opt = torch.optim.AdamW(params, lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        gen = torch.Generator().manual_seed(10)  # the same noise each step: the loss must fall
        share = forward_backward(fam, denoiser, objective, latents, cond, info, cfg, gen, 2, scaler)
        losses.append(float(share))
        if step == 0:
            first = {n: p.grad.clone() for n, p in denoiser.named_parameters() if p.grad is not None}
        opt.step()
    return MiniRun(losses, first, denoiser, params, cfg, reasons)


def _assert_close_to_bf16(run: MiniRun, ref: MiniRun, precision: str) -> None:
    for got, want in zip(run.losses, ref.losses, strict=True):
        assert got == pytest.approx(want, rel=LOSS_TOLERANCE[precision]), (precision, run.losses, ref.losses)
    assert set(run.first_grads) == set(ref.first_grads)  # (Qwen's last text-stream output feeds nothing)
    got = torch.cat([run.first_grads[n].flatten() for n in sorted(ref.first_grads)])
    want = torch.cat([ref.first_grads[n].flatten() for n in sorted(ref.first_grads)])
    assert float(torch.nn.functional.cosine_similarity(got, want, dim=0)) >= GRAD_COSINE[precision]
    assert _rel(got, want) > 1e-3  # the base really is quantised / fp8: not the bf16 gradient
    drop, ref_drop = run.losses[0] - run.losses[-1], ref.losses[0] - ref.losses[-1]
    assert ref_drop > 0 and 0.8 * ref_drop <= drop <= 1.25 * ref_drop  # it learns as bf16 does


@pytest.mark.parametrize("family", ["flux", "qwen-image"])  # (SDXL and Z-Image: train() below)
def test_lora_on_a_quantised_base_trains_like_bf16_with_gradients_only_on_lora(family, tiny_model):
    ref = _mini_run(family, tiny_model(family), "bf16")
    for precision in ("int8", "nf4"):
        run = _mini_run(family, tiny_model(family), precision)
        assert run.reasons == []
        _assert_close_to_bf16(run, ref, precision)
        trainable = {n for n, p in run.denoiser.named_parameters() if p.requires_grad}
        assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
        assert all(p.dtype == torch.float32 for p in run.params)
        assert set(run.first_grads) <= trainable  # gradients reach only the LoRA
        wrapped = [m for _, m in run.denoiser.named_modules() if hasattr(m, "base_layer")]
        assert any(isinstance(m.base_layer, QuantisedLinear) for m in wrapped)  # LoRA on quantised layers


@pytest.mark.parametrize("precision", ["int8", "nf4", "fp8"])
def test_regional_compile_on_a_converted_base_gives_the_eager_loss(precision, tiny_model):
    """Through AOTAutograd (backend aot_eager: no code generation), where FLUX.1's single block,
    whose two outputs alias one tensor, failed with torchao's subclass weights until
    compile._unalias_outputs (seen on the H200 with Inductor)."""
    apply = {"fp8_emulate": True} if precision == "fp8" else {}
    eager = _mini_run("flux", tiny_model("flux"), precision, steps=1, **apply)
    fam, cfg = families.get("flux"), eager.cfg
    latents, cond, info = _BATCHES["flux"]
    denoiser = _denoiser("flux", tiny_model("flux"))
    apply_base_precision(denoiser, precision, CPU, **apply)
    torch.manual_seed(0)
    params = add_lora(denoiser, lora_config_for(cfg, fam.spec.lora_targets))
    denoiser.train()
    compile_denoiser(denoiser, params, backend="aot_eager")
    objective = make_objective(fam, cfg, fam.scheduler_config(str(tiny_model("flux")), None))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    gen = torch.Generator().manual_seed(10)
    share = forward_backward(fam, denoiser, objective, latents, cond, info, cfg, gen, 2, scaler)
    assert float(share) == pytest.approx(eager.losses[0], rel=1e-5)
    state = compile_state(denoiser)
    assert state is not None and state.active, state and state.fallback_reason  # traced, no fallback
    torch._dynamo.reset()


# -- never fatal ------------------------------------------------------------------------------------


def test_layers_that_cannot_be_quantised_stay_bf16_and_the_run_still_trains(tiny_model):
    run = _mini_run("z-image", tiny_model("z-image"), "nf4", steps=2)
    assert run.reasons == [
        "nf4: 12 of 31 block linears kept in bf16 (size not a multiple of the 64-weight nf4 block: 12)"
    ]
    assert all(np.isfinite(run.losses)) and all(p.grad is not None for p in run.params)


def test_fp8_without_a_capable_gpu_leaves_the_bf16_base_and_trains(tiny_model, caplog):
    with caplog.at_level("WARNING", logger="lorastudio.training.planning.quantize"):
        run = _mini_run("flux", tiny_model("flux"), "fp8", steps=2)
    assert run.reasons == [
        "fp8: needs a CUDA GPU of compute capability >= 8.9 (this device: cpu); the base stays in bf16"
    ]
    assert "compute capability" in caplog.text
    assert not list(iter_quantised(run.denoiser)) and all(np.isfinite(run.losses))


def test_fp8_emulated_on_the_cpu_converts_the_block_linears_and_trains(tiny_model):
    ref = _mini_run("flux", tiny_model("flux"), "bf16")
    run = _mini_run("flux", tiny_model("flux"), "fp8", fp8_emulate=True)
    assert run.reasons == []
    converted = [n for n, _ in iter_quantised(run.denoiser)]
    assert len(converted) == len(block_linears(_denoiser("flux", tiny_model("flux"))))
    _assert_close_to_bf16(run, ref, "fp8")


# -- the real train() -------------------------------------------------------------------------------
