"""LoHa / LoKr layers whose forward Dynamo can trace whole.

peft's LycorisLayer forward (LoHa and LoKr, peft 0.17-0.22) decides per layer and per call
whether to add the adapter's output with `torch.rand(1) > module_dropout`, module dropout or not:
a data-dependent branch. Dynamo cannot trace it (`Unsupported: Data-dependent branching`), so
the ordinary compile breaks each block's graph at every adapted layer, and the saved block graphs
(training/speed/precompile.py, one whole graph per block class) were refused for every LoHa / LoKr run:
measured on an H100 in session 38 (`bench.precompile_families --set adapter=lokr`: five families,
nothing saved, each block class "goes to the ordinary compile"; the DoRA set saved and loaded).
lorastudio never sets module dropout (the config has no such field; imports refuse it), so the
draw decides nothing: `rand(1) > 0` is true but for a draw of exactly 0.

`trace_friendly_lycoris` moves each LoHa / LoKr layer to a subclass of its class (one per class,
named `_traced_<module>_<class>` and kept as a global of this module so that pickle finds it by
reference, which Dynamo's saved guards need, as training/speed/compile_trace.py does for attention
processors) whose forward adds every active adapter's output without the draw, and otherwise
defers to peft's: adapters disabled (training/preservation.py flips that flag) or merged, or any
active adapter with module dropout above 0 in training. The sums are the same operations in the
same order, so outputs and gradients are bitwise peft's (but for the factored LoKr and LoHa
linears below, within fp rounding); the one difference is that the global
CPU generator is no longer drawn once per layer and step (nothing of a run reads that stream
after the adapter's initialisation: noise, timesteps and data order have their own generators).
No library offers this: peft's forward is written for module dropout, which it always samples.

A LoKr linear's output is computed from its two Kronecker factors without building the weight
(`lokr_linear_delta`): peft (and LyCORIS' default) materialise `kron(w1, w2)`, a full [out, in]
matrix per adapted layer and step, and multiply the input by it, so a LoKr step cost a second
full-size matmul per adapted layer in each direction (and, eager, kept an fp32 copy of every
layer's weight for the backward). Measured on an H100 at 1024 px (RESULTS note 53): FLUX.1's LoKr
step 0.625 s against the LoRA step's 0.451 s, Z-Image 0.477 s against 0.312 s; Qwen-Image's LoKr
step did not fit 80 GB. From the factors: 0.505 s (LoRA 0.454 s), 0.353 s (0.315 s), and
Qwen-Image's fits (0.518 s against 0.449 s). With W = s * kron(w1, w2), w1 [a_out, a_in], w2 [b_out, b_in] and x
seen as [..., a_in, b_in], W x is w1 X w2^T: two small matmuls (the cheaper order is taken),
the same sum in another order (outputs within fp rounding of peft's, not bitwise; conv and
rank-dropout layers keep peft's delta).

A LoHa linear's output is likewise taken without its full weight where that is cheaper
(`loha_linear_delta`): peft builds W = s * (w1_a w1_b) * (w2_a w2_b), [out, in], per layer and
step, then F.linear(x, W), keeping W for the backward. The Hadamard product of two rank-r products
is a rank-r1*r2 product: (A1 B1) * (A2 B2) = A B with the row-wise Khatri-Rao products
A[i, (p, q)] = A1[i, p] A2[i, q] ([out, r1*r2]) and B[(p, q), j] = B1[p, j] B2[q, j]
([r1*r2, in]), so W x = A (B x): N*(in + out)*r1*r2 multiply-adds for N rows instead of
N*in*out plus the weight's 2*r*in*out. It is taken where r1*r2*(in + out) < in*out (rank 16 on
a 3072 x 3072 projection: 256 against 1536, ~6x fewer; rank 64 there keeps peft's delta, as do
conv layers, the CP (`hada_t1` / `hada_t2`) form and rank dropout in training). Outputs and
gradients within fp rounding of peft's, not bitwise.

Both factored deltas keep only the layer's input as it came (bf16), not an fp32 copy of it nor
LoKr's fp32 intermediate, for the backward: training/adapters/lycoris_grad.py (RELIABILITY 2080).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from lorastudio.training.adapters.layer_classes import swap_layer_classes
from lorastudio.training.adapters.lycoris_grad import loha_delta, lokr_delta

TRACED_ATTR = "_lorastudio_traced_forward"


class _NoDrawForward:
    """The forward mixed in front of a peft LycorisLayer class (see the module)."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        layer: Any = self
        active = [a for a in layer.active_adapters if a in layer._available_adapters]
        if (
            layer.disable_adapters
            or layer.merged
            or (layer.training and any(layer.module_dropout[a] for a in active))
        ):
            return super().forward(x, *args, **kwargs)  # type: ignore[misc]
        previous_dtype = x.dtype
        result = layer.base_layer(x, *args, **kwargs)
        for adapter in active:
            delta = lokr_linear_delta(layer, adapter, x)
            if delta is None:
                delta = loha_linear_delta(layer, adapter, x)
            if delta is None:
                delta = layer._get_delta_activations(adapter, x, *args, **kwargs)
            result = result + delta
        return result.to(previous_dtype)


def _factor(layer: Any, adapter: str, name: str) -> torch.Tensor | None:
    """LoKr factor `name` ("w1" / "w2") of `adapter`: the full matrix, or its low-rank product."""
    full = getattr(layer, f"lokr_{name}")
    if adapter in full:
        return full[adapter]
    a, b = getattr(layer, f"lokr_{name}_a"), getattr(layer, f"lokr_{name}_b")
    if adapter in a and adapter in b:
        return a[adapter] @ b[adapter]
    return None


def lokr_linear_delta(layer: Any, adapter: str, x: torch.Tensor) -> torch.Tensor | None:
    """The LoKr linear `layer`'s adapter output for input x [..., in] without building
    kron(w1, w2) (see the module): [..., out], or None where peft's own delta must be used (not a
    LoKr linear, a CP-decomposed w2, rank dropout in training, factors that do not tile the
    weight)."""
    from peft.tuners.lokr.layer import Linear as LoKrLinear

    if not isinstance(layer, LoKrLinear) or adapter in layer.lokr_t2:
        return None
    if layer.training and layer.rank_dropout[adapter]:
        return None
    w1, w2 = _factor(layer, adapter, "w1"), _factor(layer, adapter, "w2")
    weight = layer.get_base_layer().weight
    if w1 is None or w2 is None or w1.dim() != 2 or w2.dim() != 2 or weight.dim() != 2:
        return None
    (a_out, a_in), (b_out, b_in) = w1.shape, w2.shape
    if weight.shape != (a_out * b_out, a_in * b_in):
        return None
    return lokr_delta(x, w1, w2, layer.scaling[adapter], _compute_dtype(layer, x, w1))  # [..., out]


def loha_linear_delta(layer: Any, adapter: str, x: torch.Tensor) -> torch.Tensor | None:
    """The LoHa linear `layer`'s adapter output for input x [..., in] as A (B x) with the
    Khatri-Rao factors of its two rank-r products (see the module): [..., out], or None where
    peft's own delta must be used (not a LoHa linear, the CP form, rank dropout in training,
    factors that do not match the weight, or r1*r2*(in + out) >= in*out: not cheaper)."""
    from peft.tuners.loha.layer import Linear as LoHaLinear

    if not isinstance(layer, LoHaLinear) or adapter in layer.hada_t1 or adapter not in layer.hada_w1_a:
        return None
    if layer.training and layer.rank_dropout[adapter]:
        return None
    w1_a, w1_b = layer.hada_w1_a[adapter], layer.hada_w1_b[adapter]  # [out, r1], [r1, in]
    w2_a, w2_b = layer.hada_w2_a[adapter], layer.hada_w2_b[adapter]  # [out, r2], [r2, in]
    weight = layer.get_base_layer().weight
    if weight.dim() != 2 or w1_a.dim() != 2 or w2_a.dim() != 2:
        return None
    (dim_out, r1), (_, r2) = w1_a.shape, w2_a.shape
    dim_in = w1_b.shape[-1]
    if weight.shape != (dim_out, dim_in) or w2_a.shape[0] != dim_out or w2_b.shape != (r2, dim_in):
        return None
    if r1 * r2 * (dim_in + dim_out) >= dim_in * dim_out:
        return None
    scale = layer.scaling[adapter]  # read per call: generation's LoRA strength (peft's set_scale)
    a = (w1_a.unsqueeze(2) * (w2_a * scale).unsqueeze(1)).flatten(1)  # [out, r1*r2]
    b = (w1_b.unsqueeze(1) * w2_b.unsqueeze(0)).flatten(0, 1)  # [r1*r2, in]
    return loha_delta(x, a, b, _compute_dtype(layer, x, w1_a))  # [..., r1*r2] -> [..., out]


def _compute_dtype(layer: Any, x: torch.Tensor, factor: torch.Tensor) -> torch.dtype:
    """The dtype peft's `_cast_input_dtype` gives x for this adapter: the factor's, unless the
    layer's input casting is off (peft's disable_input_dtype_casting)."""
    return factor.dtype if getattr(layer, "cast_input_dtype_enabled", True) else x.dtype


def trace_friendly_lycoris(model: torch.nn.Module) -> int:
    """Give every LoHa / LoKr layer of `model` the draw-free forward (see the module).
    Idempotent; returns how many layers this call changed (0 for LoRA / DoRA models)."""
    from peft.tuners.lycoris_utils import LycorisLayer

    return swap_layer_classes(
        model, LycorisLayer, _NoDrawForward, TRACED_ATTR, "_traced_", sys.modules[__name__]
    )
