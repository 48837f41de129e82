"""A compiled block's tensor arguments made alike across the blocks of its class, so that they
share one compiled graph (training/speed/compile.py's regional compile; RESULTS note 38). No value a
block computes changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def with_stable_inputs(compiled: Callable[..., Any], *, promote: bool) -> Callable[..., Any]:
    """`compiled` (a block's compiled call) with its tensor arguments made alike across the
    blocks of a class first, so that they share one compiled graph (Dynamo guards on each
    argument's strides and requires_grad; every variant is another trace, and on a cold cache
    another Inductor compile: RESULTS note 38):

    - `canonical_strides`: a contiguous argument gets its shape's row-major strides (a view).
      FLUX.1's first single block gets the last double block's output, the later ones a slice of
      a longer concatenation: same memory order, another stride at the size-1 batch dimension.
    - `promote` (regional compile of the repeated blocks; not for "wide" regions with CUDA
      graphs): while gradients are on, a floating-point activation argument (3-D or more) that
      needs no gradient becomes a leaf that does. Block 0's hidden states come from frozen
      embedders (no gradient), every later block's from a block with LoRA: without this, block
      0 is a graph of its own (FLUX.1, Qwen-Image, Z-Image). The leaf has no history, so nothing
      upstream changes; its gradient is computed and dropped (FLUX.1: one dX matmul of block 0's
      q/k/v, ~0.1 % of a step).
    Neither changes a value the block computes."""

    def call(*args: Any, **kwargs: Any) -> Any:
        grad = promote and torch.is_grad_enabled()
        return compiled(
            *[stable_argument(a, grad) for a in args],
            **{k: stable_argument(v, grad) for k, v in kwargs.items()},
        )

    return call


def stable_argument(value: Any, promote: bool) -> Any:
    value = canonical_strides(value)
    if (
        promote
        and type(value) is torch.Tensor
        and value.dim() >= 3
        and value.is_floating_point()
        and not value.requires_grad
    ):
        return value.detach().requires_grad_()
    return value


def canonical_strides(value: Any) -> Any:
    """`value` itself, or for a contiguous tensor whose strides are not its shape's row-major
    ones (possible only at size-1 dimensions) a view of it with those strides."""
    if type(value) is not torch.Tensor or value.dim() == 0 or not value.is_contiguous():
        return value
    expected, step = [], 1
    for size in reversed(value.shape):
        expected.append(step)
        step *= max(int(size), 1)
    if tuple(reversed(expected)) == value.stride():
        return value
    return value.view(-1).view(value.shape)  # [same shape], row-major strides, same storage
