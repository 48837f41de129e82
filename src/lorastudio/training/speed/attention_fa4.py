"""FlashAttention-4 (`flash_attn.cute`, the optional extra `pip install lorastudio[fa4]`) as the
denoiser's attention kernel (`attention_backend = "fa4"`, or "auto" where the probe finds it faster
than cuDNN and correct: training/speed/attention.py).

FA4 is a CuTe-DSL kernel for Hopper (sm90) and Blackwell (sm10x / sm11x / sm12x). Its public
`flash_attn_func` is a torch.autograd.Function whose forward and backward JIT-compile CuTe kernels:
torch.compile cannot trace into it. This module wraps FA4's forward and backward as two torch
custom ops (`lorastudio::fa4_forward`, `lorastudio::fa4_backward`, fake kernels for tracing,
autograd through `torch.library.register_autograd`), so a compiled block keeps the kernel as one
opaque node, as it keeps SDPA. It calls FA4's `_flash_attn_fwd` / `_flash_attn_bwd` directly (the
only way to run the backward on its own), hence the exact pin of flash-attn-4 in the extra.

The engine routes a denoiser's attention here through diffusers' attention dispatcher (what
FLUX.1's, Qwen-Image's and Z-Image's processors call): `route_denoiser_to_fa4` registers
`fa4_attention` under diffusers' "flash_4_hub" backend name (whose own implementation downloads a
kernel from the Hub at run time: never used here) and points every attention processor of the
denoiser at it. Calls FA4 cannot take (an attention mask: Qwen-Image's padded captions and
Z-Image's unequal lengths; dropout, causal, grouped KV heads, fp32, an unsupported head dim) run
torch's SDPA instead, under the flags training.speed.attention.apply_attention set (flash first).
No peer library offers FA4 as a traceable training op with this fallback: hence hand-written.
"""

from __future__ import annotations

import importlib
import logging
import os
from functools import cache
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

EXTRA = "pip install 'lorastudio[fa4]'"
MODULE = "flash_attn.cute.interface"
SUPPORTED_MAJORS = (9, 10, 11, 12)  # Hopper sm90; Blackwell sm100/103, sm110, sm120/121
DTYPES = (torch.bfloat16, torch.float16)
MAX_HEAD_DIM = 128  # on every supported arch (sm90 takes up to 256, sm10x 128 or special shapes)


CACHE_ENV, CACHE_DIR_ENV = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"
_fa4_set: set[tuple[str, str]] = set()  # the (CACHE_ENV, CACHE_DIR_ENV) values keep_fa4_cache set here


def keep_fa4_cache(cache_dir: Path) -> bool:
    """Turn on FA4's on-disk JIT cache in `cache_dir` (flash_attn.cute.cache_utils reads the two
    variables when it is first imported; its entries are keyed by FA4's sources and the CuTe DSL's
    version) unless the user set either variable, so that a run loads the kernels its attention
    probe (a child process: it inherits the environment) or an earlier run compiled, instead of
    compiling them again in its first step. Process-wide; call before flash_attn.cute is
    imported. Returns whether this call set them (False: the user's choice stands). The values an
    earlier call of this process set are not a choice: a later run with another home moves them
    (RELIABILITY 1012)."""
    now = (os.environ.get(CACHE_ENV), os.environ.get(CACHE_DIR_ENV))
    if now != (None, None) and now not in _fa4_set:
        return False
    os.environ[CACHE_ENV] = "1"
    os.environ[CACHE_DIR_ENV] = str(cache_dir)
    _fa4_set.add(("1", str(cache_dir)))
    return True


@cache
def _import_error() -> str | None:
    """Why flash_attn.cute cannot be imported here (None when it can); imported once per process."""
    try:
        importlib.import_module(MODULE)
    except Exception as err:  # noqa: BLE001 -- any import failure (missing package, CUDA libs, DSL) is the reason
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return None


def fa4_unavailable(device: torch.device) -> str | None:
    """Why FA4 cannot run on `device` (None when it can): it needs a CUDA device of compute
    capability 9.x (Hopper) or 10.x-12.x (Blackwell) and an importable flash_attn.cute (the
    extra). The device check comes first, so a CPU machine never imports the CuTe DSL."""
    if device.type != "cuda":
        return f"FlashAttention-4 is a CUDA kernel (the training device is {device.type})"
    if not torch.cuda.is_available():
        return "FlashAttention-4 needs CUDA, and torch sees no CUDA device here"
    major, minor = torch.cuda.get_device_capability(device)
    if major not in SUPPORTED_MAJORS:
        name = torch.cuda.get_device_name(device)
        return (
            f"FlashAttention-4 runs on Hopper (sm90) and Blackwell (sm100+) GPUs; {name} is sm{major}{minor}"
        )
    error = _import_error()
    if error is not None:
        return f"flash_attn.cute (FlashAttention-4) is not importable ({error}); install it with {EXTRA}"
    return None


@torch.library.custom_op("lorastudio::fa4_forward", mutates_args=(), device_types="cuda")
def fa4_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """FA4 forward on [B, L, H, D] q and [B, S, H, D] k / v: (out [B, L, H, D], lse [B, H, L] fp32)."""
    from flash_attn.cute.interface import _flash_attn_fwd

    out, lse, *_ = _flash_attn_fwd(q, k, v, softmax_scale=scale, causal=False, return_lse=True)
    return out, lse


@fa4_forward.register_fake
def _fa4_forward_fake(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, length, heads, _ = q.shape
    out = q.new_empty(batch, length, heads, v.shape[-1])  # [B, L, H, Dv]
    return out, q.new_empty(batch, heads, length, dtype=torch.float32)  # lse [B, H, L]


@torch.library.custom_op("lorastudio::fa4_backward", mutates_args=(), device_types="cuda")
def fa4_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FA4 backward: (dq, dk, dv), each shaped like its input."""
    from flash_attn.cute.interface import _flash_attn_bwd

    dq, dk, dv = _flash_attn_bwd(q, k, v, out, grad_out, lse, softmax_scale=scale, causal=False)[:3]
    return dq, dk, dv


@fa4_backward.register_fake
def _fa4_backward_fake(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.scale = scale


def _backward(ctx: Any, grad_out: torch.Tensor | None, _grad_lse: torch.Tensor | None) -> tuple:
    q, k, v, out, lse = ctx.saved_tensors
    if grad_out is None:  # only the lse was used (never by fa4_attention)
        grad_out = torch.zeros_like(out)
    dq, dk, dv = fa4_backward(grad_out, q, k, v, out, lse, ctx.scale)
    return dq, dk, dv, None


fa4_forward.register_autograd(_backward, setup_context=_setup_context)


def fa4_takes(
    query: torch.Tensor,
    key: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    enable_gqa: bool = False,
) -> bool:
    """Whether FA4 (as wrapped here) computes this call: no mask, dropout, causal or grouped KV
    heads, bf16 / fp16 CUDA tensors, equal q / k head dims of at most MAX_HEAD_DIM, a multiple of 8."""
    head_dim = query.shape[-1]
    return (
        attn_mask is None
        and not dropout_p
        and not is_causal
        and not enable_gqa
        and query.is_cuda
        and query.dtype in DTYPES
        and key.dtype == query.dtype
        and key.shape[-2] == query.shape[-2]
        and key.shape[-1] == head_dim
        and head_dim % 8 == 0
        and head_dim <= MAX_HEAD_DIM
    )


def fa4_attention(
    query: torch.Tensor,  # [B, L, H, D]
    key: torch.Tensor,  # [B, S, H, D]
    value: torch.Tensor,  # [B, S, H, Dv]
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    _parallel_config: Any = None,
) -> torch.Tensor:
    """Attention in diffusers' dispatcher layout ([B, L, H, D] in, [B, L, H, Dv] out): FA4 where
    `fa4_takes` says so, else torch SDPA on the same inputs (its flags decide the kernel)."""
    if fa4_takes(query, key, attn_mask, dropout_p, is_causal, enable_gqa):
        softmax_scale = query.shape[-1] ** -0.5 if scale is None else float(scale)
        return fa4_forward(query, key, value, softmax_scale)[0]
    out = F.scaled_dot_product_attention(
        query.transpose(1, 2),  # [B, H, L, D]
        key.transpose(1, 2),
        value.transpose(1, 2),
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )  # [B, H, L, Dv]
    return out.transpose(1, 2)  # [B, L, H, Dv]


def _register_with_diffusers() -> Any:
    """Register fa4_attention under diffusers' FLASH_4_HUB backend name; returns that name."""
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    name = AttentionBackendName.FLASH_4_HUB
    if _AttentionBackendRegistry._backends.get(name) is not fa4_attention:
        _AttentionBackendRegistry.register(name, constraints=[])(fa4_attention)
    return name


def route_denoiser_to_fa4(denoiser: torch.nn.Module) -> int:
    """Point every attention processor of `denoiser` that dispatches through diffusers (it has an
    `_attention_backend` attribute: FLUX.1, Qwen-Image, Z-Image and the engine's real-RoPE
    processors) at fa4_attention. Call after the processors are final and before the first
    (compiled) forward. Returns how many processors were routed (0: the model has none)."""
    name = _register_with_diffusers()
    routed = 0
    for module in denoiser.modules():
        processor = getattr(module, "processor", None)
        if processor is not None and hasattr(processor, "_attention_backend"):
            processor._attention_backend = name
            routed += 1
    log.info("attention: %d processors routed to FlashAttention-4", routed)
    return routed
