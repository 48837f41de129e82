"""Memory features of low-VRAM plans: activation checkpointing modes (block swap: block_swap.py).

Activation checkpointing (TrainConfig.gradient_checkpointing). The repeated blocks of every
denoiser are the units diffusers checkpoints (`self._gradient_checkpointing_func(block, ...)` in
the model's forward; the U-Net also checkpoints its resnets). `apply_checkpointing` installs one
function for all of them: "full" = non-reentrant `torch.utils.checkpoint` (only the block inputs
are kept, the whole block is recomputed in the backward); "selective" = the same with a selective
policy: the outputs of the compute-heavy ops (attention, matmuls and convolutions other than the
LoRA up-projections) are kept, the cheap ops (norms, activations, elementwise, dequantisation,
rank-r LoRA matmuls, the small matmuls of the LoKr / LoHa factored deltas) are recomputed.
Selective does not work on a regionally compiled block (measured on torch 2.13, CPU Inductor:
under the policy a compiled block shows only its extern matmul calls (`addmm.out`); the fused
norm/activation kernels never reach the policy (pytorch/pytorch#161889, #161541, #143176), and
keeping the extern outputs fails in the backward with "Tensor cached during selective activation
checkpoint has been mutated", as Inductor reuses those buffers). So a compiled block is
checkpointed in full and the reason is returned (and logged once at run time when the blocks are
compiled after the checkpointing was applied). Selective and compile together would need the
checkpoint inside the compiled region (compile(checkpoint(block))), which compile.py does not do.

Block swap (TrainConfig.offload_blocks) is in training/planning/block_swap.py.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.speed.compile import repeated_blocks, runs_compiled

log = logging.getLogger(__name__)

CHECKPOINTING_MODES = ("auto", "off", "selective", "full")
SELECTIVE_ON_COMPILED = (
    "selective checkpointing -> full for the compiled blocks: a regionally compiled block runs as"
    " fused Inductor kernels the selective policy cannot see (pytorch/pytorch#161889), and keeping"
    " its extern matmul outputs fails (Inductor reuses their buffers)"
)
# compute-heavy ops whose outputs the selective policy keeps (everything else is recomputed);
# a matmul is kept only when its inner dimension exceeds the adapter's (see adapter_inner_dim)
_MATMUL_NAMES = ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "convolution")
_ATTENTION_NAMES = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
)
MATMUL_OPS = frozenset(getattr(torch.ops.aten, n) for n in _MATMUL_NAMES if hasattr(torch.ops.aten, n))
ATTENTION_OPS = frozenset(getattr(torch.ops.aten, n) for n in _ATTENTION_NAMES if hasattr(torch.ops.aten, n))

# denoiser -> the checkpointing mode asked for ("full" | "selective")
_CHECKPOINTING: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()


def _inner_dim(packet: Any, args: tuple[Any, ...]) -> int:
    """The reduction length of a matmul-like op (per output element: ~2x that many FLOPs)."""
    if packet is torch.ops.aten.convolution:
        return int(args[1][0].numel())  # weight [out, in/groups, *kernel]
    first = args[1] if packet in (torch.ops.aten.addmm, torch.ops.aten.baddbmm) else args[0]
    return int(first.shape[-1])


def compute_heavy_policy(cheap_inner_dim: int = 0) -> Callable[..., CheckpointPolicy]:
    """The selective policy: keep the outputs of attention and of the matmuls / convolutions whose
    inner dimension exceeds `cheap_inner_dim`, recompute every other op in the backward.

    With an adapter, `cheap_inner_dim` is adapter_inner_dim's: LoRA's up-projection lora_B (inner
    dim = rank) and the small matmuls of the LoKr / LoHa factored deltas cost almost nothing to
    recompute, but keeping their outputs (fp32, as large as the base layer's input or output) would
    cost more memory than the base matmul they ride on."""

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        packet = getattr(op, "overloadpacket", None)
        if packet in ATTENTION_OPS:
            return CheckpointPolicy.MUST_SAVE
        if packet in MATMUL_OPS and _inner_dim(packet, args) > cheap_inner_dim:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _param_dicts(module: torch.nn.Module, *names: str) -> list[torch.Tensor]:
    """The tensors of `module`'s peft ParameterDicts / ModuleDicts `names` (every adapter's)."""
    found = []
    for name in names:
        held = getattr(module, name, None)
        if isinstance(held, torch.nn.ParameterDict):
            found.extend(held.values())
        elif isinstance(held, torch.nn.ModuleDict):
            found.extend(
                m.weight for m in held.values() if isinstance(getattr(m, "weight", None), torch.Tensor)
            )
    return found


def _factored_inner_dims(module: torch.nn.Module) -> list[int]:
    """The inner dimensions of the small matmuls of `module`'s LoKr / LoHa deltas (none for another
    layer): LoKr's kron(w1, w2) x is two matmuls of inner a_in and b_in (w1 [a_out, a_in], w2
    [b_out, b_in], each full or a rank-r product; training/adapters/lycoris_grad.kron_apply), LoHa's
    (x b^T) a^T ends in one of inner r1 * r2 (its Khatri-Rao factor a [out, r1*r2]) after the
    projection of inner `in` (whose [..., r1*r2] output is kept, as LoRA's lora_A output)."""
    dims = []
    for name in ("lokr_w1", "lokr_w2"):
        fulls = _param_dicts(module, name)
        lows = _param_dicts(module, f"{name}_b")  # [r, a_in] / [r, b_in]
        dims += [int(w.shape[1]) for w in fulls + lows if w.dim() >= 2]
        dims += [int(w.shape[0]) for w in lows]  # the rank of the product a @ b
    firsts, seconds = _param_dicts(module, "hada_w1_a"), _param_dicts(module, "hada_w2_a")  # [out, r]
    dims += [
        int(a.shape[1]) * int(b.shape[1])
        for a, b in zip(firsts, seconds, strict=False)
        if a.dim() == b.dim() == 2
    ]
    return dims


def _base_inner_dim(module: torch.nn.Module) -> int | None:
    """The inner dimension of an adapted layer's own matmul (in_features; in / groups x kernel for
    a convolution), None for a module peft did not wrap."""
    base = getattr(module, "base_layer", None)
    weight = getattr(base, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() < 2:
        return None
    return math.prod(int(d) for d in weight.shape[1:])  # [out, in] or [out, in/groups, *kernel]: the shape
    # alone (an nf4 / int8 base's tensor subclass has no row to index; a swapped-out block's no storage)


def adapter_inner_dim(denoiser: torch.nn.Module) -> int:
    """The largest inner dimension of an adapter matmul the selective policy recomputes
    (compute_heavy_policy's `cheap_inner_dim`; 0 without an adapter): LoRA's rank (lora_A's output
    size, the inner dimension of lora_B) and the inner dimensions of the LoKr / LoHa factored
    deltas' small matmuls (_factored_inner_dims), the latter only where below every adapted layer's
    own inner dimension, so that no base layer's matmul is recomputed for them (a LoKr whose
    lokr_factor leaves a factor as wide as the layer keeps that matmul's output, as before)."""
    ranks = [
        int(getattr(a, "out_features", None) or getattr(a, "out_channels", 0))
        for m in denoiser.modules()
        if isinstance(getattr(m, "lora_A", None), torch.nn.ModuleDict)
        for a in m.lora_A.values()
    ]
    factored = [d for m in denoiser.modules() for d in _factored_inner_dims(m)]
    bases = [d for m in denoiser.modules() if (d := _base_inner_dim(m)) is not None]
    narrowest = min(bases, default=0)
    return max([*ranks, *(d for d in factored if d < narrowest)], default=0)


def _checkpoint_function(mode: str, rank: int, reported: bool) -> Callable[..., Any]:
    """The `_gradient_checkpointing_func` diffusers calls as f(block, *args) for each block;
    `rank`: the adapter's cheap inner dimension (adapter_inner_dim, compute_heavy_policy);
    `reported`: the selective -> full fallback was already returned (not logged again)."""
    warned = [True] if reported else []
    policy = compute_heavy_policy(rank)

    def selective_contexts() -> tuple[Any, Any]:
        return create_selective_checkpoint_contexts(policy)

    def run(block: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if mode == "selective":
            if not runs_compiled(block):
                return checkpoint(block, *args, use_reentrant=False, context_fn=selective_contexts, **kwargs)
            if not warned:
                warned.append(True)
                log.warning("checkpointing: %s", SELECTIVE_ON_COMPILED)
        # no context_fn argument: Dynamo traces this call inside a compile "wide" region, and it
        # cannot trace a context_fn passed in ("checkpoint not implemented for ... context_fn")
        return checkpoint(block, *args, use_reentrant=False, **kwargs)

    return run


def apply_checkpointing(denoiser: torch.nn.Module, mode: str) -> list[str]:
    """Checkpoint the repeated blocks of `denoiser` (the units its diffusers forward checkpoints).

    Takes: the denoiser (after the adapter is added: the selective policy reads its shapes; best after
    the blocks are compiled, so the returned reasons are complete) and a
    TrainConfig.gradient_checkpointing value: "off" disables it, "auto" changes nothing, "full" /
    "selective" as described in the module docstring.
    Returns: fallback reasons (empty when the mode is honoured as asked; selective on compiled
    blocks becomes full for those blocks). Raises ConfigError for an unknown mode or a model that
    cannot checkpoint.
    """
    if mode not in CHECKPOINTING_MODES:
        problem = FieldProblem(
            "gradient_checkpointing", f"unknown mode {mode!r}; use one of {CHECKPOINTING_MODES}"
        )
        raise ConfigError([problem])
    if mode == "auto":
        return []
    if mode == "off":
        if getattr(denoiser, "is_gradient_checkpointing", False):
            denoiser.disable_gradient_checkpointing()
        _CHECKPOINTING.pop(denoiser, None)
        return []
    if not getattr(denoiser, "_supports_gradient_checkpointing", False):
        problem = FieldProblem(
            "gradient_checkpointing", f"{type(denoiser).__name__} cannot checkpoint its blocks"
        )
        raise ConfigError([problem])
    fallbacks = []
    if mode == "selective" and any(runs_compiled(b) for b in repeated_blocks(denoiser)):
        fallbacks.append(SELECTIVE_ON_COMPILED)
        log.warning("checkpointing: %s", SELECTIVE_ON_COMPILED)
    denoiser.enable_gradient_checkpointing(
        gradient_checkpointing_func=_checkpoint_function(mode, adapter_inner_dim(denoiser), bool(fallbacks))
    )
    _CHECKPOINTING[denoiser] = mode
    return fallbacks


def checkpointing_mode(denoiser: torch.nn.Module) -> str:
    """How the repeated blocks of `denoiser` are checkpointed now: "off", "selective" or "full"
    ("full" also when selective was asked for compiled blocks, or diffusers' own default)."""
    if not getattr(denoiser, "is_gradient_checkpointing", False):
        return "off"
    mode = _CHECKPOINTING.get(denoiser, "full")
    if mode == "selective" and any(runs_compiled(b) for b in repeated_blocks(denoiser)):
        return "full"
    return mode
