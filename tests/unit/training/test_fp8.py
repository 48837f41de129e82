"""Fp8FrozenLinear: the frozen-weight fp8 linear (training/speed/fp8.py), on the CPU reference path.

The CUDA path (torch._scaled_mm) is checked by tests/gpu; here the same quantisation and
autograd run through reference_scaled_mm, so the maths (scales, layouts, gradients) is tested.
"""

from __future__ import annotations

import pytest
import torch

from lorastudio.training.speed.fp8 import E4M3_MAX, Fp8FrozenLinear, fp8_matmul_supported, quantise_rows


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_quantise_rows_scales_each_row_to_the_e4m3_range():
    x = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [300.0, 10.0, -1000.0]])
    q, scale = quantise_rows(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (3, 1)
    assert torch.allclose(q.float().abs().amax(dim=1)[[0, 2]], torch.tensor([E4M3_MAX, E4M3_MAX]))
    assert torch.equal(q[1].float(), torch.zeros(3))  # an all-zero row stays zero (no NaN)
    assert _rel(q.float() * scale, x) < 0.05


@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_input_gradient_match_the_bf16_linear(bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=bias).to(torch.bfloat16).requires_grad_(False)
    fp8 = Fp8FrozenLinear(linear)
    x = torch.randn(2, 7, 64, dtype=torch.bfloat16, requires_grad=True)  # [B, L, K]
    y_ref, y = linear(x), fp8(x)  # [B, L, N]
    assert y.shape == y_ref.shape and y.dtype == torch.bfloat16
    assert _rel(y, y_ref) < 0.06  # e4m3 keeps 3 mantissa bits: a few % per layer
    g = torch.randn_like(y_ref)
    (gx_ref,) = torch.autograd.grad(y_ref, x, g)
    (gx,) = torch.autograd.grad(y, x, g)
    assert _rel(gx, gx_ref) < 0.06
    assert not any(p.requires_grad for p in fp8.parameters())
    assert _rel(fp8.weight, linear.weight) < 0.05  # the stored weight, dequantised


def test_no_activation_is_saved_for_the_backward():
    linear = torch.nn.Linear(32, 32).to(torch.bfloat16).requires_grad_(False)
    fp8 = Fp8FrozenLinear(linear)
    x = torch.randn(4, 32, dtype=torch.bfloat16, requires_grad=True)
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        fp8(x)
    assert saved and all(t.dtype == torch.float8_e4m3fn or t.numel() <= 32 for t in saved)
    assert not any(t.shape == x.shape and t.dtype == x.dtype for t in saved)


def test_refuses_dims_not_divisible_by_16():
    with pytest.raises(ValueError, match="divisible by 16"):
        Fp8FrozenLinear(torch.nn.Linear(20, 32))


def test_peft_lora_runs_on_an_fp8_base_layer():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
    model = model.to(torch.bfloat16)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["0"], init_lora_weights=False))
    lora_layer = peft_model.base_model.model[0]
    lora_layer.base_layer = Fp8FrozenLinear(lora_layer.base_layer)
    peft_model.base_model.model[2] = Fp8FrozenLinear(peft_model.base_model.model[2])
    x = torch.randn(5, 32, dtype=torch.bfloat16)
    peft_model(x).float().pow(2).mean().backward()
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    assert trainable and all(p.grad is not None and p.grad.abs().sum() > 0 for p in trainable)


def test_fp8_matmuls_need_a_recent_cuda_gpu():
    assert not fp8_matmul_supported(torch.device("cpu"))
