"""Child process of training.attention.probe_cudnn: cuDNN SDPA forward + backward at given
shapes, compared with flash attention. Usage:

    python -m lorastudio.training.attention_probe '{"device": "cuda:0", "dtype": "bfloat16",
        "shapes": [[batch, heads, tokens, head_dim], ...]}'

Prints one JSON line, {"ok": true} or {"ok": false, "reason": "..."}, and exits 0; a crash of the
kernel (the case this guards against) ends the process with a non-zero code instead.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOLERANCE = 2e-2  # max |cudnn - flash| / max |flash| of the output and of each q/k/v gradient


def run_one(
    backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor
) -> list:
    """Output and q/k/v gradients of SDPA through `backend` only; q/k/v/grad [B, H, L, D]."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v)  # [B, H, L, D]
        out.backward(grad)
    torch.cuda.synchronize(q.device)
    return [out.detach(), q.grad, k.grad, v.grad]


def probe(device: str, dtype: str, shapes: list[list[int]]) -> dict:
    """{"ok": True} when cuDNN matches flash within TOLERANCE at every shape, else the reason."""
    dev = torch.device(device)
    if dev.index is None:  # "cuda": the current device of this process (CUDA_VISIBLE_DEVICES applies)
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    gen = torch.Generator(device=dev).manual_seed(0)
    for batch, heads, tokens, head_dim in shapes:
        q, k, v, grad = (
            torch.randn(
                batch, heads, tokens, head_dim, device=dev, dtype=getattr(torch, dtype), generator=gen
            )
            for _ in range(4)
        )
        try:
            got = run_one(SDPBackend.CUDNN_ATTENTION, q, k, v, grad)
        except RuntimeError as err:  # no cuDNN kernel for this shape / build
            return {
                "ok": False,
                "reason": f"no cuDNN kernel at {tokens} tokens: {str(err).splitlines()[0][:200]}",
            }
        want = run_one(SDPBackend.FLASH_ATTENTION, q, k, v, grad)
        for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
            err = float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6))
            if not err <= TOLERANCE:
                return {
                    "ok": False,
                    "reason": f"cuDNN {name} differs from flash by {err:.3g} at {tokens} tokens",
                }
    return {"ok": True}


def main() -> None:
    spec = json.loads(sys.argv[1])
    print(json.dumps(probe(spec["device"], spec["dtype"], spec["shapes"])), flush=True)


if __name__ == "__main__":
    main()
