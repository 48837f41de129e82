"""Child process of training.attention.probe_attention: each asked-for kernel's forward + backward
("cudnn": torch SDPA on cuDNN; "fa4": FlashAttention-4 through training.attention_fa4's custom
op) at given shapes, compared with flash attention and, when asked, timed. Usage:

    python -m lorastudio.training.attention_probe '{"device": "cuda:0", "dtype": "bfloat16",
        "shapes": [[batch, heads, tokens, head_dim], ...], "kernels": ["cudnn", "fa4"], "time": true}'

Prints one JSON line per kernel as soon as it is done, {"kernel": "cudnn", "ok": true, "ms": 1.6}
or {"kernel": "fa4", "ok": false, "reason": "..."}, and exits 0; a crash of a kernel (the case
this guards against) ends the process with a non-zero code instead, and the parent blames the
first kernel without a line. The inputs are laid out [B, L, H, D] as the denoisers' attention
processors hand them over (SDPA gets the [B, H, L, D] view, as diffusers' native backend does).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOLERANCE = 2e-2  # max |kernel - flash| / max |flash| of the output and of each q/k/v gradient
WARMUP, REPEATS = 2, 10  # fwd + bwd runs per shape; FA4 compiles on its first call
Attn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sdpa(backend: SDPBackend) -> Attn:
    """[B, L, H, D] attention through torch SDPA restricted to `backend`."""

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2)  # [B, L, H, D]

    return run


def fa4() -> Attn:
    """[B, L, H, D] attention through FA4's custom op (imported here: only when asked for)."""
    from lorastudio.training.attention_fa4 import fa4_forward

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return fa4_forward(q, k, v, q.shape[-1] ** -0.5)[0]

    return run


def run_one(attn: Attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor) -> list:
    """Output and q/k/v gradients of `attn`; q/k/v/grad [B, L, H, D]."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = attn(q, k, v)  # [B, L, H, D]
    out.backward(grad)
    torch.cuda.synchronize(q.device)
    return [out.detach(), q.grad, k.grad, v.grad]


def time_ms(attn: Attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor) -> float:
    """Milliseconds per forward + backward of `attn`: REPEATS runs back to back between two CUDA
    events after WARMUP runs (no sync in between, so the host queues ahead as in a training step
    and a kernel's host-side launch cost counts only where it outruns the GPU)."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    for _ in range(WARMUP):
        attn(q, k, v).backward(grad)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(q.device)
    start.record()
    for _ in range(REPEATS):
        attn(q, k, v).backward(grad)
        q.grad = k.grad = v.grad = None  # no accumulation kernels in the timed region
    end.record()
    torch.cuda.synchronize(q.device)
    return start.elapsed_time(end) / REPEATS


def probe_kernel(
    name: str, device: torch.device, dtype: torch.dtype, shapes: list[list[int]], timed: bool
) -> dict:
    """{"kernel": name, "ok": True, "ms": ...} when `name` matches flash within TOLERANCE at every
    shape (ms: summed medians when `timed`, else None), else {"ok": False, "reason": ...}."""
    gen = torch.Generator(device=device).manual_seed(0)
    total_ms = 0.0
    for batch, heads, tokens, head_dim in shapes:
        q, k, v, grad = (
            torch.randn(batch, tokens, heads, head_dim, device=device, dtype=dtype, generator=gen)
            for _ in range(4)
        )  # [B, L, H, D]
        try:
            attn = fa4() if name == "fa4" else sdpa(SDPBackend.CUDNN_ATTENTION)
            got = run_one(attn, q, k, v, grad)
        except (RuntimeError, ImportError, AssertionError, ValueError, TypeError) as err:  # no kernel here
            first = (str(err).splitlines() or [type(err).__name__])[0][:200]
            return {"kernel": name, "ok": False, "reason": f"no {name} kernel at {tokens} tokens: {first}"}
        want = run_one(sdpa(SDPBackend.FLASH_ATTENTION), q, k, v, grad)
        for part, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
            err = float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6))
            if not err <= TOLERANCE:
                return {
                    "kernel": name,
                    "ok": False,
                    "reason": f"{name} {part} differs from flash by {err:.3g} at {tokens} tokens",
                }
        if timed:
            total_ms += time_ms(attn, q, k, v, grad)
    return {"kernel": name, "ok": True, "ms": round(total_ms, 4) if timed else None}


def main() -> None:
    spec = json.loads(sys.argv[1])
    device = torch.device(spec["device"])
    if device.index is None:  # "cuda": the current device of this process (CUDA_VISIBLE_DEVICES applies)
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    dtype = getattr(torch, spec["dtype"])
    for name in spec.get("kernels", ["cudnn"]):
        row = probe_kernel(name, device, dtype, spec["shapes"], bool(spec.get("time")))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
