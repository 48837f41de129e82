"""A DoRA convolution with lora_dropout > 0 on a bf16 base (training/dora_conv.py, RELIABILITY
2224): peft 0.22's convolution DoRA ran the dropped fp32 input through the bf16 base weight and
raised, so an SDXL DoRA run with a convolution among its lora_targets and lora_dropout > 0 failed
at its first step on every bf16 GPU. Through add_lora, on the tiny SDXL UNet in bf16."""

from __future__ import annotations

import pytest
import torch

from lorastudio.tiny.models import sdxl_unet
from lorastudio.training.lora import add_lora, lora_config_for


def _unet(dropout: float) -> torch.nn.Module:
    """The tiny SDXL UNet in bf16 with a DoRA on its resnets' first convolution (add_lora)."""
    unet = sdxl_unet(0).to(torch.bfloat16)
    cfg = type(
        "Cfg", (), {"lora_rank": 2, "lora_alpha": 2.0, "lora_dropout": dropout, "lora_targets": ["conv1"]}
    )()
    cfg.adapter = "dora"
    params = add_lora(unet, lora_config_for(cfg, ()))
    with torch.no_grad():
        for i, p in enumerate(params):  # B is zero-initialised: make every adapter count
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.05)
    return unet.train()


def _layer(unet: torch.nn.Module) -> torch.nn.Module:
    return next(m for n, m in unet.named_modules() if n.endswith("resnets.0.conv1"))


def test_a_dora_convolution_with_dropout_trains_on_a_bf16_base() -> None:
    """Before: RuntimeError "expected scalar type Float but found BFloat16" in peft's
    _DoraConvNdLayer.forward. Now the dropped input's base output is computed with the weight cast
    to its dtype, as peft's DoRA linear does: checked against that formula, with the same mask."""
    layer = _layer(_unet(0.5))
    x = torch.randn(1, layer.base_layer.in_channels, 8, 8, dtype=torch.bfloat16)  # [B, C, H, W]
    torch.manual_seed(3)
    out = layer(x)
    out.float().square().mean().backward()
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    grads = [layer.lora_A["default"].weight.grad, layer.lora_magnitude_vector["default"].weight.grad]
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)

    base, a, b = layer.base_layer, layer.lora_A["default"], layer.lora_B["default"]
    scaling, dora = layer.scaling["default"], layer.lora_magnitude_vector["default"]
    with torch.no_grad():
        torch.manual_seed(3)
        dropped = layer.lora_dropout["default"](x.float())  # [B, C, H, W], the same mask
        weight = base.weight.float()  # [out, in, k, k]: the linear layer's weight.to(x.dtype)
        delta = (b.weight.flatten(1) @ a.weight.flatten(1)).reshape(weight.shape)
        norm = dora.get_weight_norm(weight, delta, scaling)  # [out, 1, 1, 1]
        scale = dora.weight / norm
        expected = base(x) + (
            (scale - 1) * base._conv_forward(dropped, weight, None) + scale * b(a(dropped)) * scaling
        )
    torch.testing.assert_close(out, expected.to(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_without_a_dropped_input_the_layer_is_peft_own(dropout: float) -> None:
    """No dropout, or eval: the base output peft is given is the layer's own; nothing changes."""
    from peft.tuners.lora.dora import _DoraConvNdLayer

    unet = _unet(dropout)
    layer = _layer(unet)
    if dropout:
        layer.eval()
    x = torch.randn(1, layer.base_layer.in_channels, 8, 8, dtype=torch.bfloat16)
    dora = layer.lora_magnitude_vector["default"]
    out = layer(x)
    dora.__class__ = next(c for c in type(dora).__mro__[1:] if issubclass(c, _DoraConvNdLayer))  # peft's
    assert torch.equal(out, layer(x))
