"""The factored LoKr / LoHa linear deltas (training/adapters/lycoris_forward.py) as autograd Functions that
keep only the layer's input, in its own dtype, for the backward.

The adapter factors are fp32 (training/adapters/lora.py casts them), the base and its activations bf16, so
the deltas cast the input up (as peft's layers do). Written with plain tensor ops, autograd then
kept per adapted layer and step what those ops save: the fp32 copy of the input [..., in] (twice
the bf16 input's bytes) and, for LoKr, the fp32 intermediate of the two small matmuls (as large
again): measured by saved_tensors_hooks on one 3072 x 3072 bf16 linear at [1, 4096, 3072], rank
16, LoKr kept 96 MiB, LoHa 58 MiB and LoRA 48 MiB per layer where the frozen base layer keeps no
activation (its weight only); Inductor's partitioner kept the same (RELIABILITY 2080). Likely
the LoKr step's ~10 GiB above the LoRA step on FLUX.1 (RESULTS note 53; not yet re-measured).

Here the forward runs the same fp32 maths but saves the input as it came (bf16: half the fp32
copy's bytes, often the very tensor another op keeps already) and, for LoHa, the small [..., r1*r2]
projection; the backward casts the input up again and recomputes the cheap intermediate (one
small matmul of LoKr's two, ~1/48 of a 3072 x 3072 base layer's FLOPs at the default factor; LoHa's
projection is kept, being r1*r2 / in of the input). The same operations in fp32, so outputs and
gradients are within fp rounding of the plain ops (the sums' order only); the gradient of the
input comes back in the input's dtype, as the cast's own backward gave it.

Under torch.compile the Functions would not help: Dynamo inlines an autograd.Function into the
joint graph, common subexpression elimination merges the backward's cast of the input with the
forward's, and Inductor's partitioner keeps that fp32 cast (it feeds a matmul of the backward, so
it never recomputes it) and LoKr's intermediate (matmuls are never recomputed), measured by AOT's
min-cut partition on the CPU: LoKr's Function kept the plain ops' 96 MiB. So while compiling
(`torch.compiler.is_compiling()`) `lokr_delta` runs the plain ops inside a non-reentrant
`torch.utils.checkpoint` (Dynamo tags the region's nodes for recomputation, which the partitioner
honours: it keeps the bf16 input and recomputes the cast and the small matmuls) and `loha_delta`
checkpoints only the cast (the [..., r1*r2] projection, a matmul, stays kept).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint


def kron_apply(xs: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """w1 X w2^T for each [a_in, b_in] slice of xs [..., a_in, b_in] (w1 [a_out, a_in], w2
    [b_out, b_in]): [..., a_out, b_out], the cheaper order of the two small matmuls."""
    (a_out, a_in), (b_out, b_in) = w1.shape, w2.shape
    if a_in * b_in * b_out + a_in * b_out * a_out <= a_out * a_in * b_in + a_out * b_in * b_out:
        t = xs @ w2.t()  # [..., a_in, b_out]
        return (t.transpose(-1, -2) @ w1.t()).transpose(-1, -2)  # [..., a_out, b_out]
    t = (xs.transpose(-1, -2) @ w1.t()).transpose(-1, -2)  # [..., a_out, b_in]
    return t @ w2.t()  # [..., a_out, b_out]


class LoKrDelta(torch.autograd.Function):
    """s * kron(w1, w2) x for x [..., a_in * b_in] computed in `dtype` (the factors'), keeping x
    as it came and the factors for the backward (see the module)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: float, dtype: torch.dtype
    ):
        ctx.save_for_backward(x, w1, w2)
        ctx.scale, ctx.dtype = scale, dtype
        (_, a_in), (_, b_in) = w1.shape, w2.shape
        xs = x.to(dtype).unflatten(-1, (a_in, b_in))  # [..., a_in, b_in]
        return kron_apply(xs, w1, w2).flatten(-2) * scale  # [..., out]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, w1, w2 = ctx.saved_tensors
        (a_out, a_in), (b_out, b_in) = w1.shape, w2.shape
        g = grad.to(ctx.dtype).unflatten(-1, (a_out, b_out)) * ctx.scale  # [..., a_out, b_out]
        xs = x.to(ctx.dtype).unflatten(-1, (a_in, b_in))  # [..., a_in, b_in]
        gx = gw1 = gw2 = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[2]:
            u = (g.transpose(-1, -2) @ w1).transpose(-1, -2)  # w1^T g: [..., a_in, b_out]
            if ctx.needs_input_grad[0]:
                gx = (u @ w2).flatten(-2).to(x.dtype)  # [..., in]
            if ctx.needs_input_grad[2]:
                gw2 = u.reshape(-1, b_out).t() @ xs.reshape(-1, b_in)  # [b_out, b_in]
        if ctx.needs_input_grad[1]:
            v = g @ w2  # [..., a_out, b_in]
            gw1 = torch.einsum("...oj,...ij->oi", v, xs)  # [a_out, a_in]
        return gx, gw1, gw2, None, None


class LoHaDelta(torch.autograd.Function):
    """(x @ b^T) @ a^T for x [..., in] computed in `dtype` (a [out, r], b [r, in]: LoHa's
    Khatri-Rao factors, the scale folded into a), keeping x as it came, the [..., r] projection
    and the factors for the backward (see the module)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype):
        h = x.to(dtype) @ b.t()  # [..., r]
        ctx.save_for_backward(x, h, a, b)
        ctx.dtype = dtype
        return h @ a.t()  # [..., out]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, h, a, b = ctx.saved_tensors
        g = grad.to(ctx.dtype)  # [..., out]
        ga = gb = gx = None
        if ctx.needs_input_grad[1]:
            ga = g.reshape(-1, g.shape[-1]).t() @ h.reshape(-1, h.shape[-1])  # [out, r]
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[2]:
            gh = g @ a  # [..., r]
            if ctx.needs_input_grad[2]:
                xr = x.to(ctx.dtype).reshape(-1, x.shape[-1])  # [rows, in]
                gb = gh.reshape(-1, gh.shape[-1]).t() @ xr  # [r, in]
            if ctx.needs_input_grad[0]:
                gx = (gh @ b).to(x.dtype)  # [..., in]
        return gx, ga, gb, None


def plain_lokr_delta(
    x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: float, dtype: torch.dtype
) -> torch.Tensor:
    """LoKrDelta's forward as plain ops: the compiled path under a checkpoint; alone, what autograd
    kept before RELIABILITY 2080 (bench/probe_speed.py's `keep32`)."""
    xs = x.to(dtype).unflatten(-1, (w1.shape[1], w2.shape[1]))  # [..., a_in, b_in]
    return kron_apply(xs, w1, w2).flatten(-2) * scale  # [..., out]


def plain_loha_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """LoHaDelta's forward as plain ops: what autograd kept before RELIABILITY 2080 (the fp32 copy
    of x; bench/probe_speed.py's `keep32`)."""
    return (x.to(dtype) @ b.t()) @ a.t()  # [..., r] -> [..., out]


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype)


def lokr_delta(
    x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: float, dtype: torch.dtype
) -> torch.Tensor:
    """s * kron(w1, w2) x for x [..., a_in * b_in] in `dtype`: [..., a_out * b_out], keeping for the
    backward x as it came and the factors, eager or compiled (see the module)."""
    if torch.compiler.is_compiling():
        return checkpoint(
            plain_lokr_delta, x, w1, w2, scale, dtype, use_reentrant=False, preserve_rng_state=False
        )
    return LoKrDelta.apply(x, w1, w2, scale, dtype)


def loha_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(x @ b^T) @ a^T for x [..., in] in `dtype`: [..., out], keeping for the backward x as it
    came, the [..., r] projection and the factors, eager or compiled (see the module)."""
    if torch.compiler.is_compiling():
        xc = checkpoint(_cast, x, dtype, use_reentrant=False, preserve_rng_state=False)  # [..., in]
        return (xc @ b.t()) @ a.t()  # [..., r] -> [..., out]
    return LoHaDelta.apply(x, a, b, dtype)
