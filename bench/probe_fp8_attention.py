"""GPU probe: fp8 attention (cuDNN, bench/fp8_attention.py) against torch's bf16 cuDNN SDPA at the
transformer families' 1024 px attention shapes. For each variant: the forward and backward CUDA
times (medians of events around each call), the time of quantizing Q, K, V, and the relative
error (Frobenius) of O, dQ, dK, dV against an fp32 reference, next to bf16's own error.

usage: PYTHONPATH=src:. python -m bench.probe_fp8_attention --out DIR [--shapes 1x24x4608x128 ...]
Rows go to stdout and DIR/fp8attn.jsonl. Needs `nvidia-cudnn-frontend` (carried as a wheel).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench import fp8_attention as fa8

VARIANTS: dict[str, fa8.Fp8Options] = {  # Hopper builds only fp8 outputs (fa8.Fp8Options)
    "o_fp8_dqkv_fp8": fa8.Fp8Options(),
    "dqkv_bf16": fa8.Fp8Options(dqkv_bf16=True),
    "bwd_o_bf16": fa8.Fp8Options(bwd_o_bf16=True),
    "do_e5m2": fa8.Fp8Options(do_e5m2=True),
    "dp_headroom8": fa8.Fp8Options(dp_headroom=8.0),
    "o_bf16": fa8.Fp8Options(o_bf16=True, dqkv_bf16=True),
}


def cuda_ms(fn: Callable[[], Any], warm: int = 3, iters: int = 15) -> float:
    """Median CUDA milliseconds of one fn() call."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return round(statistics.median(times), 4)


def inputs(shape: tuple[int, int, int, int], logit_std: float, seed: int = 0) -> list[torch.Tensor]:
    """q, k, v, dO as [B,H,S,D] bf16 views of [B,S,H,D] memory (diffusers' layout); q k^T / sqrt(D)
    has standard deviation ~logit_std."""
    b, h, s, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def one(scale: float) -> torch.Tensor:
        x = torch.randn(b, s, h, d, device="cuda", generator=gen) * scale
        return x.to(torch.bfloat16).transpose(1, 2)

    return [one(math.sqrt(logit_std)), one(math.sqrt(logit_std)), one(1.0), one(1e-3)]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor) -> list[torch.Tensor]:
    """fp32 math SDPA: [O, dQ, dK, dV]."""
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel([SDPBackend.MATH]):
        o = F.scaled_dot_product_attention(*leaves)
    o.backward(g.float())
    return [o.detach()] + [x.grad for x in leaves]


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.float() - ref).norm() / ref.norm())


def bf16_row(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, ref: list) -> dict:
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]

    def fwd() -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(*leaves)

    o = fwd()
    o.backward(g)
    errors = [rel(o, ref[0])] + [rel(x.grad, r) for x, r in zip(leaves, ref[1:], strict=True)]

    def step() -> None:
        fwd().backward(g)

    fwd_ms = cuda_ms(lambda: fwd())
    return {"variant": "bf16_cudnn", "fwd_ms": fwd_ms, "fwd_bwd_ms": cuda_ms(step), "errors": errors}


def fp8_row(row: dict[str, Any], opts: fa8.Fp8Options, q, k, v, g, ref: list) -> None:
    """Fill `row` with the variant's times and errors; row["stage"] says where it stopped."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    (q8, dq), (k8, dk), (v8, dv) = (fa8.quantize(x) for x in (q, k, v))
    row["quant_qkv_ms"] = cuda_ms(lambda: [fa8.quantize(x) for x in (q, k, v)])
    row["stage"] = "forward"
    o, d_o, stats, _ = fa8.forward(q8, k8, v8, dq, dk, dv, scale, opts)
    row["stage"] = "backward"
    grad_scales = None
    if not opts.dqkv_bf16:  # e4m3 gradients: scales from the reference's amax (an upper bound)
        grad_scales = tuple(
            torch.full((1, 1, 1, 1), fa8.E4M3_MAX / float(r.abs().amax()), device="cuda") for r in ref[1:]
        )
    grads = fa8.backward(q8, k8, v8, o, g, stats, (dq, dk, dv, d_o), scale, opts, grad_scales)
    o_real = o.float() * d_o
    outs = [o_real]
    for i, x in enumerate(grads[:3]):
        outs.append(x.float() / grad_scales[i] if grad_scales else x)
    row["errors"] = [rel(x, r) for x, r in zip(outs, ref, strict=True)]
    row["stage"] = "timing"
    row["fwd_ms"] = cuda_ms(lambda: fa8.forward(q8, k8, v8, dq, dk, dv, scale, opts))
    row["bwd_ms"] = cuda_ms(
        lambda: fa8.backward(q8, k8, v8, o, g, stats, (dq, dk, dv, d_o), scale, opts, grad_scales)
    )
    row["fwd_bwd_ms"] = round(row["quant_qkv_ms"] + row["fwd_ms"] + row["bwd_ms"], 4)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", nargs="*", default=["1x24x4608x128", "2x24x4608x128"])
    parser.add_argument("--logit-std", nargs="*", type=float, default=[1.0, 4.0])
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
    import cudnn

    args.out.mkdir(parents=True, exist_ok=True)
    head = {
        "torch": torch.__version__,
        "cudnn_backend": cudnn.backend_version(),
        "frontend": cudnn.__version__,
    }
    print(json.dumps(head), flush=True)
    for text in args.shapes:
        shape = tuple(int(x) for x in text.split("x"))
        for logit_std in args.logit_std:
            q, k, v, g = inputs(shape, logit_std)  # type: ignore[arg-type]
            ref = reference(q, k, v, g)
            rows = [bf16_row(q, k, v, g, ref)]
            for name in args.variants:
                opts = VARIANTS[name]
                t0 = time.monotonic()
                row = {"variant": f"fp8_{name}"}
                try:
                    fp8_row(row, opts, q, k, v, g, ref)
                    row.pop("stage")
                except (RuntimeError, ValueError, TypeError, cudnn.cudnnGraphNotSupportedError) as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:600]
                rows.append(row)
                rows[-1]["wall_s"] = round(time.monotonic() - t0, 1)
            for row in rows:
                row.update(shape=text, logit_std=logit_std)
                if "errors" in row:
                    row["errors"] = [f"{e:.2e}" for e in row["errors"]]
                line = json.dumps(row)
                print(line, flush=True)
                with (args.out / "fp8attn.jsonl").open("a") as f:
                    f.write(line + "\n")
            del ref, q, k, v, g
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
