"""FlashAttention-4 against torch SDPA (cuDNN, flash) at the families' real 1024 px attention
shapes: forward + backward accuracy against an fp32 math reference, and median times.

Each shape is [batch, heads, tokens, head_dim]; the inputs are laid out [B, L, H, D] as the
denoisers' attention processors hand them over (SDPA gets the [B, H, L, D] view, as diffusers'
native backend does; FA4 takes [B, L, H, D] itself). Every kernel sees the same fresh random
inputs; times rotate over ROTATE input sets (each [B, L, H, D] tensor is 20-65 MB: near the
60 MB L2). FA4 runs through the engine's custom op (training/speed/attention_fa4.py), eager and inside
torch.compile (fullgraph).

usage: PYTHONPATH=src:. python -m bench.probe_fa4 --out DIR [flux qwen zimage zimage-refiner]
Prints one JSON line per (shape, kernel) and a table; rows also go to DIR/fa4.jsonl.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHAPES = {  # 1024 px: 4096 image tokens (+ text: FLUX.1 512, Qwen-Image / Z-Image 128)
    "flux": (1, 24, 4608, 128),
    "qwen": (1, 24, 4224, 128),
    "zimage": (2, 30, 4224, 128),
    "zimage-refiner": (2, 30, 4096, 128),
}
ROTATE, WARMUP, REPEATS = 3, 3, 20


def kernels() -> dict[str, Callable[..., Any]]:
    """[B, L, H, D] attention functions by name."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from lorastudio.training.speed.attention_fa4 import fa4_attention

    def sdpa(backend: Any) -> Callable[..., Any]:
        def run(q: Any, k: Any, v: Any) -> Any:
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            return out.transpose(1, 2)

        return run

    return {
        "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "flash": sdpa(SDPBackend.FLASH_ATTENTION),
        "fa4": fa4_attention,
        "fa4-compiled": torch.compile(fa4_attention, fullgraph=True),
    }


def kernels_math(q: Any, k: Any, v: Any) -> Any:
    """[B, L, H, D] attention through SDPA under the caller's kernel choice."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(
        1, 2
    )


def rel(a: Any, b: Any) -> float:
    """||a - b|| / ||b|| in fp32."""
    return float((a.float() - b.float()).norm() / b.float().norm())


def fwd_bwd(attn: Callable[..., Any], q: Any, k: Any, v: Any, grad: Any) -> list[Any]:
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = attn(q, k, v)
    out.backward(grad)
    return [out.detach(), q.grad, k.grad, v.grad]


def timed(attn: Callable[..., Any], sets: list[tuple[Any, ...]]) -> dict[str, float]:
    """Per call: the median ms of the forward and of forward + backward with a sync after each run
    (`*_sync_ms`: what one isolated call costs, host overhead included), and the mean ms of
    forward + backward over REPEATS runs queued back to back (`fwd_bwd_ms`: the GPU time a training
    step sees when the host runs ahead, as the engine's probe times it)."""
    import torch

    fwd, both = [], []
    for i in range(WARMUP + REPEATS):
        q, k, v, grad = sets[i % len(sets)]
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        e[0].record()
        out = attn(q, k, v)
        e[1].record()
        out.backward(grad)
        e[2].record()
        torch.cuda.synchronize()
        if i >= WARMUP:
            fwd.append(e[0].elapsed_time(e[1]))
            both.append(e[0].elapsed_time(e[2]))
    leaves = [tuple(t.detach().requires_grad_(i < 3) for i, t in enumerate(s)) for s in sets]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(REPEATS):
        q, k, v, grad = leaves[i % len(leaves)]
        attn(q, k, v).backward(grad)
        q.grad = k.grad = v.grad = None  # no accumulation kernels in the timed region
    end.record()
    torch.cuda.synchronize()
    return {
        "fwd_sync_ms": round(sorted(fwd)[len(fwd) // 2], 4),
        "fwd_bwd_sync_ms": round(sorted(both)[len(both) // 2], 4),
        "fwd_bwd_ms": round(start.elapsed_time(end) / REPEATS, 4),
    }


def probe_shape(name: str, shape: tuple[int, int, int, int]) -> list[dict[str, Any]]:
    import torch

    batch, heads, tokens, head_dim = shape
    gen = torch.Generator(device="cuda").manual_seed(0)

    def draw() -> tuple[Any, ...]:
        return tuple(
            torch.randn(batch, tokens, heads, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(4)
        )  # q, k, v, grad [B, L, H, D]

    sets = [draw() for _ in range(ROTATE)]
    q, k, v, grad = sets[0]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):  # fp32 math reference (torch's default: no TF32)
        ref = fwd_bwd(kernels_math, *(t.float() for t in (q, k, v, grad)))
    rows = []
    for kernel, attn in kernels().items():
        row: dict[str, Any] = {"shape": name, "bhld": list(shape), "kernel": kernel}
        try:
            got = fwd_bwd(attn, q, k, v, grad)
            row.update(
                {
                    part: round(rel(a, b), 5)
                    for part, a, b in zip(("o", "dq", "dk", "dv"), got, ref, strict=True)
                }
            )
            row["finite"] = all(bool(t.isfinite().all()) for t in got)
            row.update(timed(attn, sets))
        except Exception as err:  # noqa: BLE001 -- a benchmark: a kernel that fails is data
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    cudnn = next((r for r in rows if r["kernel"] == "cudnn" and "fwd_bwd_ms" in r), None)
    for r in rows:
        if cudnn and "fwd_bwd_ms" in r:
            r["vs_cudnn"] = round(r["fwd_bwd_ms"] / cudnn["fwd_bwd_ms"] - 1, 4)
    return rows


def main() -> None:
    import torch

    from lorastudio.training.speed.attention_fa4 import fa4_unavailable

    parser = argparse.ArgumentParser()
    parser.add_argument("shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    reason = fa4_unavailable(torch.device("cuda"))
    print(f"fa4: {reason or 'available'}; torch {torch.__version__}; {torch.cuda.get_device_name()}")
    rows = [row for name in args.shapes for row in probe_shape(name, SHAPES[name])]
    with (args.out / "fa4.jsonl").open("a") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    print(
        "| shape | kernel | fwd ms (sync) | fwd+bwd ms (sync) | fwd+bwd ms (queued) | vs cuDNN | rel err O / dQ / dK / dV vs fp32 |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        errs = " / ".join(f"{r.get(p, float('nan')):.2e}" for p in ("o", "dq", "dk", "dv"))
        print(
            f"| {r['shape']} {r['bhld']} | {r['kernel']} | {r.get('fwd_sync_ms', '-')} "
            f"| {r.get('fwd_bwd_sync_ms', '-')} | {r.get('fwd_bwd_ms', '-')} "
            f"| {r.get('vs_cudnn', '-')} | {errs} {r.get('error', '')} |"
        )


if __name__ == "__main__":
    main()
