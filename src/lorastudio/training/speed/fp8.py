"""fp8 matmuls for the FROZEN linears of a LoRA run (Hopper / Ada GPUs).

torchao's float8 training recipes (`convert_to_float8_training`) are built for full fine-tuning:
their backward always computes the weight gradient (a third fp8 matmul plus its casts) and saves
the layer input for it. In a LoRA run the base weights are frozen, so half of that backward is
wasted. `Fp8FrozenLinear` keeps only what a frozen layer needs:

  forward   y = x W^T + b      x cast to e4m3 per row, W stored in e4m3 per output row
  backward  dx = dy W          dy cast to e4m3 per row, W stored a second time, in e4m3 per
                               input column (the layout `torch._scaled_mm` needs for this product)

Both weight copies are quantised once, when the layer is converted (the weights never change), so
the layer holds 2 bytes per weight (the same as bf16) and saves NO activation for its backward.
The matmuls are `torch._scaled_mm` with row-wise scales (fp32 accumulation, bf16 output); the
casts are elementwise and fuse into neighbouring kernels under regional torch.compile.

On a device without fp8 matmuls (the CPU, GPUs before compute capability 8.9) the same maths runs
through `reference_scaled_mm` (dequantise, then matmul in fp32): slow, for tests only.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # largest finite e4m3fn value
_EPS = 1e-12


def fp8_matmul_supported(device: torch.device) -> bool:
    """Whether `device` runs `torch._scaled_mm` with e4m3 inputs: CUDA compute capability >= 8.9."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def quantise_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise e4m3 quantisation: x [M, K] (any float dtype) -> (q [M, K] e4m3, scale [M, 1] fp32)
    with x ~= q * scale; each row's largest magnitude maps to E4M3_MAX (all-zero rows: scale 1e-12)."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=_EPS)  # [M, 1]
    scale = amax / E4M3_MAX  # [M, 1]
    q = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)  # [M, K]
    return q, scale


def reference_scaled_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """What `torch._scaled_mm(a, b, scale_a, scale_b, out_dtype)` computes, by dequantising:
    a [M, K] e4m3, b [K, N] e4m3, scale_a [M, 1], scale_b [1, N] -> [M, N] out_dtype."""
    return ((a.float() * scale_a) @ (b.float() * scale_b)).to(out_dtype)


def _scaled_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    if a.device.type == "cuda":
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
    return reference_scaled_mm(a, b, scale_a, scale_b, out_dtype)


class _FrozenFp8Matmul(torch.autograd.Function):
    """x [..., K] -> x W^T [..., N]; gradient for x only (W is frozen)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        w_rows: torch.Tensor,
        w_row_scale: torch.Tensor,
        w_cols_t: torch.Tensor,
        w_col_scale: torch.Tensor,
    ) -> torch.Tensor:
        ctx.save_for_backward(w_cols_t, w_col_scale)  # no activation saved
        k = x.shape[-1]
        xq, xs = quantise_rows(x.reshape(-1, k))  # [M, K] e4m3, [M, 1]
        out = _scaled_mm(xq, w_rows.t(), xs, w_row_scale, x.dtype)  # [M, N]
        return out.reshape(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor) -> tuple:
        w_cols_t, w_col_scale = ctx.saved_tensors  # [K, N] e4m3 (row-major), [1, K]
        n = grad_out.shape[-1]
        gq, gs = quantise_rows(grad_out.reshape(-1, n))  # [M, N] e4m3, [M, 1]
        grad_x = _scaled_mm(gq, w_cols_t.t(), gs, w_col_scale, grad_out.dtype)  # [M, K]
        return grad_x.reshape(*grad_out.shape[:-1], grad_x.shape[-1]), None, None, None, None


class Fp8FrozenLinear(torch.nn.Linear):
    """A frozen nn.Linear whose matmuls run in fp8 (see the module docstring). Built from a
    Linear with in_features and out_features multiples of 16 (raises ValueError otherwise) on
    the linear's device; the bias, if any, stays in the linear's dtype. It is an nn.Linear
    subclass so peft wraps it as a LoRA target like any linear; it holds no bf16 weight: the
    two e4m3 copies and their scales are frozen parameters (moved, swapped and counted like any
    weight), and `weight` is the dequantised weight computed on access (for code that reads its
    dtype/device, e.g. peft placing the adapter; not used by forward)."""

    def __init__(self, linear: torch.nn.Linear):
        torch.nn.Module.__init__(self)  # not Linear.__init__: no bf16 weight is allocated
        n, k = linear.out_features, linear.in_features
        if n % 16 or k % 16:
            raise ValueError(f"fp8 matmuls need in/out features divisible by 16 (got {k} -> {n})")
        self.in_features, self.out_features = k, n
        self.compute_dtype = linear.weight.dtype
        w = linear.weight.detach()  # [N, K]
        w_rows, w_row_scale = quantise_rows(w)  # [N, K] e4m3, [N, 1]
        w_cols, w_col_scale = quantise_rows(w.t())  # [K, N] e4m3, [K, 1]
        frozen = {
            "w_rows": w_rows,  # [N, K] e4m3
            "w_row_scale": w_row_scale.t().contiguous(),  # [1, N]
            "w_cols_t": w_cols.contiguous(),  # [K, N] e4m3
            "w_col_scale": w_col_scale.t().contiguous(),  # [1, K]
        }
        for name, tensor in frozen.items():
            self.register_parameter(name, torch.nn.Parameter(tensor, requires_grad=False))
        bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.register_parameter("bias", bias)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        """The dequantised weight [N, K] in the compute dtype (for inspection, not used by forward)."""
        return (self.w_rows.float() * self.w_row_scale.t()).to(self.compute_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = _FrozenFp8Matmul.apply(x, self.w_rows, self.w_row_scale, self.w_cols_t, self.w_col_scale)
        return out if self.bias is None else out + self.bias  # [..., N]

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )
