"""Memory features of low-VRAM plans: activation checkpointing modes (block swap: block_swap.py).

Activation checkpointing (TrainConfig.gradient_checkpointing). The repeated blocks of every
denoiser are the units diffusers checkpoints (`self._gradient_checkpointing_func(block, ...)` in
the model's forward; the U-Net also checkpoints its resnets). `apply_checkpointing` installs one
function for all of them: "full" = non-reentrant `torch.utils.checkpoint` (only the block inputs
are kept, the whole block is recomputed in the backward); "selective" = the same with a selective
policy: the outputs of the compute-heavy ops (attention, matmuls and convolutions other than the
LoRA up-projections) are kept, the cheap ops (norms, activations, elementwise, dequantisation,
rank-r LoRA matmuls) are recomputed.
Selective does not work on a regionally compiled block (measured on torch 2.13, CPU Inductor:
under the policy a compiled block shows only its extern matmul calls (`addmm.out`); the fused
norm/activation kernels never reach the policy (pytorch/pytorch#161889, #161541, #143176), and
keeping the extern outputs fails in the backward with "Tensor cached during selective activation
checkpoint has been mutated", as Inductor reuses those buffers). So a compiled block is
checkpointed in full and the reason is returned (and logged once at run time when the blocks are
compiled after the checkpointing was applied). Selective and compile together would need the
checkpoint inside the compiled region (compile(checkpoint(block))), which compile.py does not do.

Block swap (TrainConfig.offload_blocks) is in training/block_swap.py.
"""

from __future__ import annotations

import logging
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
from lorastudio.training.compile import repeated_blocks, runs_compiled

log = logging.getLogger(__name__)

CHECKPOINTING_MODES = ("auto", "off", "selective", "full")
SELECTIVE_ON_COMPILED = (
    "selective checkpointing -> full for the compiled blocks: a regionally compiled block runs as"
    " fused Inductor kernels the selective policy cannot see (pytorch/pytorch#161889), and keeping"
    " its extern matmul outputs fails (Inductor reuses their buffers)"
)
# compute-heavy ops whose outputs the selective policy keeps (everything else is recomputed);
# a matmul is kept only when its inner dimension exceeds the LoRA rank (see compute_heavy_policy)
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

    With LoRA, `cheap_inner_dim` is the largest LoRA rank: the up-projection lora_B (inner dim =
    rank) costs almost nothing to recompute, but keeping its output (fp32, as large as the base
    layer's) would cost more memory than the base matmul it rides on."""

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        packet = getattr(op, "overloadpacket", None)
        if packet in ATTENTION_OPS:
            return CheckpointPolicy.MUST_SAVE
        if packet in MATMUL_OPS and _inner_dim(packet, args) > cheap_inner_dim:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def lora_rank(denoiser: torch.nn.Module) -> int:
    """The largest LoRA rank inside `denoiser` (0 without LoRA): the output size of lora_A."""
    ranks = [
        int(getattr(a, "out_features", None) or getattr(a, "out_channels", 0))
        for m in denoiser.modules()
        if isinstance(getattr(m, "lora_A", None), torch.nn.ModuleDict)
        for a in m.lora_A.values()
    ]
    return max(ranks, default=0)


def _checkpoint_function(mode: str, rank: int, reported: bool) -> Callable[..., Any]:
    """The `_gradient_checkpointing_func` diffusers calls as f(block, *args) for each block;
    `rank`: the LoRA rank (compute_heavy_policy); `reported`: the selective -> full fallback
    was already returned (not logged again)."""
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

    Takes: the denoiser (after the LoRA is added: the selective policy reads its rank; best after
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
        gradient_checkpointing_func=_checkpoint_function(mode, lora_rank(denoiser), bool(fallbacks))
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
