"""Which input layouts make torch's cuDNN SDPA crash on FLUX.1's attention (bench note 12: the
compiled FLUX.1 step crashed with an illegal memory access under cuDNN, while the engine's probe
with contiguous [B, H, L, D] inputs and gradient passed at the same shapes).

Each case runs in its own child process (a crash poisons the CUDA context), at FLUX.1's 1024 px
joint attention: batch 1, 24 heads x 128, 4096 + 512 tokens, bf16, forward + backward, and is
compared with flash attention on the same tensors:
  perm        q/k/v as diffusers' native backend passes them: [B, L, H, D] permuted to [B, H, L, D]
  contig      q/k/v made contiguous [B, H, L, D] (diffusers' `_native_cudnn` backend)
  slice       the gradient of the output as FLUX.1's single blocks hand it back: a slice of the
              concatenation [attention | MLP] (row stride 3072 + 12288), viewed as [B, H, L, D]
  compiled    the same function under torch.compile (Inductor)
Cases are "+"-joined parts, e.g. perm+slice+compiled.

usage: PYTHONPATH=src:. python -m bench.probe_cudnn_layouts --out DIR perm+slice contig+slice+compiled ...
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

B, H, L, D, MLP = 1, 24, 4608, 128, 12288


def attention_then_cat(q: Any, k: Any, v: Any, mlp: Any, contig: bool) -> Any:
    """q/k/v [B, L, H, D] -> SDPA over [B, H, L, D] -> [B, L, H*D] concatenated with mlp
    [B, L, MLP] (FLUX.1's single block) -> [B, L, H*D + MLP]."""
    import torch
    import torch.nn.functional as F

    q, k, v = (x.permute(0, 2, 1, 3) for x in (q, k, v))  # [B, H, L, D] views
    if contig:
        q, k, v = (x.contiguous() for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v)  # [B, H, L, D]
    out = out.permute(0, 2, 1, 3).flatten(2, 3)  # [B, L, H*D]
    return torch.cat([out, mlp], dim=2)  # [B, L, H*D + MLP]


def run_case(case: str) -> dict[str, Any]:
    """Forward + backward of `case` with cuDNN and with flash; max relative error of the q/k/v
    gradients. Raises (or crashes) where the kernel fails."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    parts = set(case.split("+"))
    gen = torch.Generator("cuda").manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    q, k, v = (r(B, L, H, D) for _ in range(3))  # [B, L, H, D]
    mlp = r(B, L, MLP)  # [B, L, MLP]
    grad = r(B, L, H * D + MLP)  # [B, L, H*D + MLP]
    if "slice" not in parts:
        grad = grad[..., : H * D].contiguous()  # only the attention part has a gradient
        mlp = mlp[..., :0]
    grads = {}
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        fn = attention_then_cat
        if "compiled" in parts:  # a fresh compile per kernel (the flags are read while tracing)
            torch._dynamo.reset()
            fn = torch.compile(attention_then_cat, dynamic=False)
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        with sdpa_kernel([backend]):
            out = fn(*leaves, mlp, "contig" in parts)
            out.backward(grad)
        torch.cuda.synchronize()
        grads[backend.name] = [t.grad.float() for t in leaves]
    errs = [
        float((a - b).abs().max() / b.abs().max())
        for a, b in zip(grads["CUDNN_ATTENTION"], grads["FLASH_ATTENTION"], strict=True)
    ]
    return {"max_rel_grad_err": round(max(errs), 5)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_case(args.one)), flush=True)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for case in args.cases:
        t = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "bench.probe_cudnn_layouts", "--one", case],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        row: dict[str, Any] = {"case": case, "rc": done.returncode, "s": round(time.monotonic() - t, 1)}
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if lines:
            row.update(json.loads(lines[-1]))
        else:
            errs = [x for x in done.stderr.splitlines() if "Error" in x or "error" in x]
            row["error"] = (errs or done.stderr.splitlines() or ["no output"])[-1][:300]
        print(json.dumps(row), flush=True)
        with open(args.out / "cudnn_layouts.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
