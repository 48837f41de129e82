"""A DoRA convolution with lora_dropout > 0 trains on a bf16 / fp16 base (RELIABILITY 2224).

peft 0.22's DoRA forward on a dropped input (lora_dropout > 0, training) computes the base
layer's output again from that input, which is the fp32 cast the adapter reads
(`_cast_input_dtype`, then the dropout). Its linear layer casts the base weight to the input's
dtype first (`DoraLinearLayer.forward`: `weight.to(x.dtype)`); its convolution layer
(`_DoraConvNdLayer.forward`) does not, and `base_layer._conv_forward(x, weight)` of an fp32 input
and a bf16 weight raised "expected scalar type Float but found BFloat16" (CPU; on CUDA "Input type
(torch.cuda.FloatTensor) and weight type (torch.cuda.BFloat16Tensor) should be the same"): an
SDXL DoRA run with a convolution among its `lora_targets` and lora_dropout > 0 failed at its
first step on every bf16 GPU (fp32 bases, the CPU default, ran).

`fix_dora_convolutions` moves each peft DoRA convolution magnitude layer to a subclass (one per
class, a global of this module: pickled by reference, as training/lora_saved.py's) whose forward,
for exactly that case (no base result given, the input's dtype not the weight's), hands peft's
forward the base layer with its weight cast to the input's dtype: the linear layer's rule. The
weight norm is unchanged (peft already adds the fp32 LoRA weight to the bf16 weight: the cast is
exact), the base output of the dropped input is computed in fp32 as the linear layer's is. Every
other call is peft's forward as it is.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from lorastudio.training.layer_classes import swap_layer_classes

FIXED_ATTR = "_lorastudio_dora_conv_cast"


class _CastBase:
    """The parts of a convolution base layer peft's DoRA convolution forward reads, its weight
    cast to `dtype` (peft reads `weight`, `bias` and `_conv_forward`)."""

    def __init__(self, base_layer: torch.nn.Module, dtype: torch.dtype):
        self.weight = base_layer.weight.to(dtype)  # [out, in / groups, *kernel]
        self.bias = base_layer.bias
        self._conv_forward = base_layer._conv_forward


class _CastDroppedInput:
    """Mixed in front of peft's DoRA convolution magnitude layer (see the module)."""

    def forward(
        self, x: torch.Tensor, *args: Any, base_layer: Any, base_result: Any = None, **kwargs: Any
    ) -> Any:
        weight = getattr(base_layer, "weight", None)
        if base_result is None and isinstance(weight, torch.Tensor) and weight.dtype != x.dtype:
            base_layer = _CastBase(base_layer, x.dtype)  # peft's linear rule: weight.to(x.dtype)
        return super().forward(x, *args, base_layer=base_layer, base_result=base_result, **kwargs)  # type: ignore[misc]


def fix_dora_convolutions(model: torch.nn.Module) -> int:
    """Give every peft DoRA convolution magnitude layer of `model` the forward above. Idempotent;
    returns how many layers this call changed (0 without a DoRA convolution)."""
    from peft.tuners.lora.dora import _DoraConvNdLayer

    return swap_layer_classes(
        model, _DoraConvNdLayer, _CastDroppedInput, FIXED_ATTR, "_cast_", sys.modules[__name__]
    )
