"""Child process of training.speed.attention.probe_attention: each asked-for kernel's forward + backward
("cudnn": torch SDPA on cuDNN; "fa4": FlashAttention-4 through training.speed.attention_fa4's custom
op) at given shapes, compared with flash attention and, when asked, timed. Usage:

    python -m lorastudio.training.speed.attention_probe '{"device": "cuda:0", "dtype": "bfloat16",
        "shapes": [[batch, heads, tokens, head_dim], ...], "kernels": ["cudnn", "fa4"], "time": true}'

Every kernel is first checked (forward + backward at each shape against flash attention; FA4
JIT-compiles here), then, when asked, timed. After a passing check it prints
{"kernel": "cudnn", "checked": true}; its result line comes when it is done: {"kernel": "cudnn",
"ok": true, "ms": 1.6} (ms: null when not timed) or {"kernel": "fa4", "ok": false, "reason": "..."}
(printed at once for a failed check). With "hold": true in the spec the child prints {"ready":
true} after the checks and waits for a line on its standard input before timing (EOF or
HOLD_TIMEOUT_S: it exits without timing): the parent runs the slow checks beside its own work
(training/speed/attention_early.py) and lets the timing run only once its GPU is quiet. Exits 0; a crash
of a kernel (the case this guards against) ends the process with a non-zero code instead, and the
parent blames the kernel it was checking (the first one with neither a "checked" nor a result
line), else the first without a result line. The inputs are laid out [B, L, H, D] as the denoisers' attention
processors hand them over (SDPA gets the [B, H, L, D] view, as diffusers' native backend does).
"""

from __future__ import annotations

import json
import select
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from lorastudio import json_read

TOLERANCE = 2e-2  # max |kernel - flash| / max |flash| of the output and of each q/k/v gradient
WARMUP, REPEATS = 2, 10  # fwd + bwd runs per shape; FA4 compiles on its first call
HOLD_TIMEOUT_S = 600.0  # a held child waits this long for its parent's go, then exits untimed
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
    from lorastudio.training.speed.attention_fa4 import fa4_forward

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


def _inputs(
    device: torch.device, dtype: torch.dtype, shapes: list[list[int]]
) -> list[tuple[int, list[torch.Tensor]]]:
    """(tokens, [q, k, v, grad] [B, L, H, D]) per shape, the same on every call (seeded)."""
    gen = torch.Generator(device=device).manual_seed(0)
    return [
        (
            tokens,
            [
                torch.randn(batch, tokens, heads, head_dim, device=device, dtype=dtype, generator=gen)
                for _ in range(4)
            ],
        )
        for batch, heads, tokens, head_dim in shapes
    ]


def _kernel(name: str) -> Attn:
    return fa4() if name == "fa4" else sdpa(SDPBackend.CUDNN_ATTENTION)


def check_kernel(name: str, device: torch.device, dtype: torch.dtype, shapes: list[list[int]]) -> dict | None:
    """None when `name` matches flash within TOLERANCE at every shape, else its failed result
    line {"kernel": name, "ok": False, "reason": ...}."""
    for tokens, (q, k, v, grad) in _inputs(device, dtype, shapes):
        try:
            got = run_one(_kernel(name), q, k, v, grad)
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
    return None


def time_kernel(name: str, device: torch.device, dtype: torch.dtype, shapes: list[list[int]]) -> float:
    """The summed fwd + bwd milliseconds of `name` over the shapes (time_ms each)."""
    return sum(time_ms(_kernel(name), q, k, v, grad) for _, (q, k, v, grad) in _inputs(device, dtype, shapes))


def probe_kernel(
    name: str, device: torch.device, dtype: torch.dtype, shapes: list[list[int]], timed: bool
) -> dict:
    """{"kernel": name, "ok": True, "ms": ...} when `name` matches flash within TOLERANCE at every
    shape (ms: summed medians when `timed`, else None), else {"ok": False, "reason": ...}."""
    failed = check_kernel(name, device, dtype, shapes)
    if failed is not None:
        return failed
    ms = round(time_kernel(name, device, dtype, shapes), 4) if timed else None
    return {"kernel": name, "ok": True, "ms": ms}


def _released(timeout: float) -> bool:
    """Wait for the parent's line on stdin: True when it came, False on EOF or timeout."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready) and bool(sys.stdin.readline())


def main() -> None:
    spec = json_read.loads(sys.argv[1])
    device = torch.device(spec["device"])
    if device.index is None:  # "cuda": the current device of this process (CUDA_VISIBLE_DEVICES applies)
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    dtype = getattr(torch, spec["dtype"])
    shapes, timed = spec["shapes"], bool(spec.get("time"))
    passed = []
    for name in spec.get("kernels", ["cudnn"]):
        failed = check_kernel(name, device, dtype, shapes)
        print(json.dumps(failed or {"kernel": name, "checked": True}), flush=True)
        if failed is None:
            passed.append(name)
    if spec.get("hold"):
        torch.cuda.empty_cache()  # hold no more GPU memory than the context while waiting
        print(json.dumps({"ready": True}), flush=True)
        if not _released(float(spec.get("hold_timeout_s", HOLD_TIMEOUT_S))):
            return
    for name in passed:
        ms = round(time_kernel(name, device, dtype, shapes), 4) if timed else None
        print(json.dumps({"kernel": name, "ok": True, "ms": ms}), flush=True)


if __name__ == "__main__":
    main()
