"""Memory features of low-VRAM plans: activation checkpointing modes and block swap.

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

Block swap (TrainConfig.offload_blocks). The frozen base weights of the swapped blocks wait in
pinned CPU memory; each block's device storages are emptied (`untyped_storage().resize_(0)`) and
refilled in place just before the block runs: in the forward, and again before its backward
(where a checkpointed block is recomputed). Refilling the same storage objects keeps every
reference autograd saved (views of the weights included: swapping `param.data` would leave the
saved views pinning the old device memory) valid and exact, and works the same for plain tensors
and quantised tensor subclasses (their inner tensors' storages are swapped). While block i runs,
the next block (the previous one in the backward) is copied on a side CUDA stream, so at most two
swapped blocks are resident at a time; all are released at the end of the backward. The trainable
LoRA parameters (requires_grad=True) are never moved. The hooks run in the block's `__call__`,
outside the compiled call of a regionally compiled block (the block's class is replaced by a
same-named subclass until `BlockSwap.detach`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    noop_context_fn,
)

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.compile import repeated_blocks

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


def is_compiled(block: torch.nn.Module) -> bool:
    """Whether `block` runs through `nn.Module.compile` (training/compile.py's regional compile)."""
    return getattr(block, "_compiled_call_impl", None) is not None


def _checkpoint_function(mode: str, rank: int, reported: bool) -> Callable[..., Any]:
    """The `_gradient_checkpointing_func` diffusers calls as f(block, *args) for each block;
    `rank`: the LoRA rank (compute_heavy_policy); `reported`: the selective -> full fallback
    was already returned (not logged again)."""
    warned = [True] if reported else []
    policy = compute_heavy_policy(rank)

    def selective_contexts() -> tuple[Any, Any]:
        return create_selective_checkpoint_contexts(policy)

    def run(block: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        context_fn = noop_context_fn
        if mode == "selective":
            if not is_compiled(block):
                context_fn = selective_contexts
            elif not warned:
                warned.append(True)
                log.warning("checkpointing: %s", SELECTIVE_ON_COMPILED)
        return checkpoint(block, *args, use_reentrant=False, context_fn=context_fn, **kwargs)

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
    if mode == "selective" and any(is_compiled(b) for b in repeated_blocks(denoiser)):
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
    if mode == "selective" and any(is_compiled(b) for b in repeated_blocks(denoiser)):
        return "full"
    return mode


# ------------------------------------------------------------------------------------------------
# block swap


def memory_problems(offload_blocks: int | None, device: torch.device) -> list[FieldProblem]:
    """Why `offload_blocks` cannot be honoured on `device` (empty when it can): block swap needs a
    CUDA device."""
    if offload_blocks and device.type != "cuda":
        where = "the CPU" if device.type == "cpu" else f"a {device.type} device"
        return [
            FieldProblem(
                "offload_blocks",
                f"block swap moves weights between CPU RAM and a GPU; this run is on {where} (use 0)",
            )
        ]
    return []


def swap_candidates(denoiser: torch.nn.Module, n_blocks: int) -> list[torch.nn.Module]:
    """The repeated blocks whose frozen weights live in CPU RAM: the last `n_blocks` in module
    order (all of them when n_blocks >= their count; none for n_blocks <= 0).

    Why the last: in the forward the resident first blocks compute while the first swapped block
    is copied in, and the last block of the forward is the first of the backward, so it is used
    again without a copy. Raises ConfigError when n_blocks > 0 and the model declares no blocks.
    """
    if n_blocks <= 0:
        return []
    blocks = repeated_blocks(denoiser)
    if not blocks:
        raise ConfigError(
            [FieldProblem("offload_blocks", f"{type(denoiser).__name__} declares no repeated blocks to swap")]
        )
    return blocks[-n_blocks:]


def _leaf_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors holding the data of `t` (itself, or a subclass's inner tensors)."""
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        inner = [getattr(t, n) for n in names]
        return [leaf for x in inner if x is not None for leaf in _leaf_tensors(x)]
    return [t]


def _frozen_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """The non-trainable parameters and the buffers of `module` (each once)."""
    seen: dict[int, torch.Tensor] = {}
    for t in [p for p in module.parameters() if not p.requires_grad] + list(module.buffers()):
        seen.setdefault(id(t), t)
    return list(seen.values())


@dataclass(eq=False)
class _Slot:
    """One swapped block: its device storages (emptied while away) and their CPU copies."""

    block: torch.nn.Module
    storages: list[torch.UntypedStorage]
    host: list[torch.UntypedStorage]
    nbytes: int
    resident: bool = True
    ready: Any = None  # CUDA event of a pending prefetch copy


@dataclass(eq=False)
class BlockSwap:
    """The block swap of one denoiser (see attach_block_swap). `moves` lists ("load" | "prefetch"
    | "release", block index) when recorded; `max_resident` is the most swapped blocks resident at
    once so far; `order` is the learned forward order of the block indices."""

    denoiser: torch.nn.Module
    device: torch.device
    slots: list[_Slot]
    record_moves: bool = False
    moves: list[tuple[str, int]] = field(default_factory=list)
    max_resident: int = 0
    order: list[int] = field(default_factory=list)
    _stream: Any = None
    _in_backward: bool = False
    _pass: list[int] = field(default_factory=list)
    _model_hook: Any = None
    _classes: list[type] = field(default_factory=list)

    @property
    def blocks(self) -> list[torch.nn.Module]:
        return [s.block for s in self.slots]

    @property
    def swapped_bytes(self) -> int:
        """Bytes of frozen block weights that live in CPU memory between uses."""
        return sum(s.nbytes for s in self.slots)

    def resident(self) -> list[int]:
        """Indices (into `blocks`) of the swapped blocks whose weights are on the device now."""
        return [i for i, s in enumerate(self.slots) if s.resident]

    # -- moves ------------------------------------------------------------------------------------
    def _record(self, kind: str, i: int) -> None:
        if self.record_moves:
            self.moves.append((kind, i))

    def _fill(self, i: int, prefetch: bool) -> None:
        """Make slot i resident: allocate its storages on the compute stream and copy the CPU
        copies in (on the side stream when prefetching on CUDA: `ready` is then its event)."""
        slot = self.slots[i]
        if slot.resident:
            return
        for st, host in zip(slot.storages, slot.host, strict=True):
            st.resize_(host.nbytes())
        if prefetch and self._stream is not None:
            self._stream.wait_stream(torch.cuda.current_stream(self.device))  # memory may be reused
            with torch.cuda.stream(self._stream):
                for st, host in zip(slot.storages, slot.host, strict=True):
                    st.copy_(host, non_blocking=True)
                slot.ready = torch.cuda.Event()
                slot.ready.record(self._stream)
        else:
            for st, host in zip(slot.storages, slot.host, strict=True):
                st.copy_(host, non_blocking=True)
        slot.resident = True
        self._record("prefetch" if prefetch else "load", i)
        self.max_resident = max(self.max_resident, len(self.resident()))

    def _ensure(self, i: int) -> None:
        """Slot i resident and its copy ordered before the compute stream's next kernels."""
        self._fill(i, prefetch=False)
        slot = self.slots[i]
        if slot.ready is not None:
            torch.cuda.current_stream(self.device).wait_event(slot.ready)
            slot.ready = None

    def _release(self, i: int) -> None:
        slot = self.slots[i]
        if not slot.resident:
            return
        if slot.ready is not None:  # an unused prefetch: its copy must finish before the free
            torch.cuda.current_stream(self.device).wait_event(slot.ready)
            slot.ready = None
        for st in slot.storages:
            st.resize_(0)
        slot.resident = False
        self._record("release", i)

    def _keep_only(self, keep: set[int | None]) -> None:
        for i in self.resident():
            if i not in keep:
                self._release(i)

    def release_all(self) -> None:
        """Send every swapped block back to CPU memory (their device storages emptied)."""
        self._keep_only(set())

    # -- order ------------------------------------------------------------------------------------
    def _neighbour(self, i: int, step: int) -> int | None:
        order = self.order or list(range(len(self.slots)))
        pos = order.index(i) + step if i in order else -1
        return order[pos] if 0 <= pos < len(order) else None

    def _observe(self, i: int) -> None:
        if i in self._pass:
            self._pass = []
        self._pass.append(i)
        if len(self._pass) == len(self.slots):
            self.order = list(self._pass)

    # -- hooks ------------------------------------------------------------------------------------
    @torch.compiler.disable
    def _on_model_start(self, module: torch.nn.Module, args: Any) -> None:
        """A new forward of the denoiser: forget any unfinished backward, prefetch the first block."""
        self._in_backward, self._pass = False, []
        first = (self.order or [0])[0]
        self._keep_only({first})
        self._fill(first, prefetch=True)

    @torch.compiler.disable
    def _before(self, block: torch.nn.Module) -> None:
        i = self._index(block)
        if self._in_backward:  # a checkpointed block recomputed in its backward: already loaded
            self._ensure(i)
            return
        self._observe(i)
        nxt = self._neighbour(i, +1)
        self._keep_only({i, nxt})
        self._ensure(i)
        if nxt is not None:
            self._fill(nxt, prefetch=True)

    @torch.compiler.disable
    def _after(self, block: torch.nn.Module, inputs: tuple[Any, ...], out: Any) -> None:
        if self._in_backward:
            return
        i = self._index(block)
        given = {id(t) for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)}
        leaves = tree_leaves(out)
        grads = [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad and id(t) not in given]
        if not torch.is_grad_enabled() or not grads:
            self._release(i)  # no backward runs through this block
            return
        for t in grads:
            t.register_hook(lambda _grad, i=i: self._on_backward(i))

    @torch.compiler.disable
    def _on_backward(self, i: int) -> None:
        """Block i's backward is about to run (the gradient of one of its outputs is ready)."""
        if not self._in_backward:
            self._in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
        prev = self._neighbour(i, -1)
        self._keep_only({i, prev})
        self._ensure(i)
        if prev is not None:
            self._fill(prev, prefetch=True)

    def _end_backward(self) -> None:
        self.release_all()
        self._in_backward, self._pass = False, []

    def _index(self, block: torch.nn.Module) -> int:
        return block.__dict__["_lorastudio_swap_index"]

    def detach(self) -> None:
        """Stop swapping: every swapped block's weights back on the device for good, the blocks'
        classes and the denoiser restored. Idempotent."""
        if self._model_hook is None:
            return
        self._model_hook.remove()
        self._model_hook = None
        for i, slot in enumerate(self.slots):
            self._ensure(i)
            slot.block.__class__ = self._classes[i]
            del slot.block.__dict__["_lorastudio_swap"]
            del slot.block.__dict__["_lorastudio_swap_index"]
            slot.host = []
        if self._stream is not None:
            torch.cuda.current_stream(self.device).synchronize()


_SWAPPING_CLASSES: dict[type, type] = {}


def _swapping_class(cls: type) -> type:
    """A subclass of `cls` (same name) whose __call__ runs the swap hooks around the normal call,
    outside any compiled call of the block."""
    if cls not in _SWAPPING_CLASSES:
        call = cls.__call__

        def __call__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            swap: BlockSwap = self.__dict__["_lorastudio_swap"]
            swap._before(self)
            out = call(self, *args, **kwargs)
            swap._after(self, (args, kwargs), out)
            return out

        attrs = {"__call__": __call__, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
        _SWAPPING_CLASSES[cls] = type(cls.__name__, (cls,), attrs)
    return _SWAPPING_CLASSES[cls]


def attach_block_swap(
    denoiser: torch.nn.Module,
    blocks: list[torch.nn.Module],
    device: torch.device,
    *,
    record_moves: bool = False,
) -> BlockSwap:
    """Keep the frozen weights of `blocks` (repeated blocks of `denoiser`, e.g. swap_candidates)
    in CPU memory and bring each block's weights to `device` only around its forward and backward.

    Takes: the denoiser with its LoRA added (its trainable parameters stay where they are), the
    blocks, the compute device (CUDA: pinned host copies, side-stream prefetch; "cpu": the same
    bookkeeping with plain copies, for tests), and whether to record every move in `.moves`.
    Blocks whose weights are elsewhere are first moved to `device`, one block at a time.
    Storages shared with tensors outside the swapped blocks stay on the device.
    Returns: the BlockSwap (every swapped block released; `.detach()` undoes it).
    Raises ValueError for a block that is not a submodule of `denoiser` or is given twice.
    """
    inside = {id(m) for m in denoiser.modules()}
    if any(id(b) not in inside for b in blocks) or len({id(b) for b in blocks}) != len(blocks):
        raise ValueError("block swap: every block must be a distinct submodule of the denoiser")
    swapped = {id(t) for b in blocks for t in _frozen_tensors(b)}
    outside = {
        leaf.untyped_storage().data_ptr()
        for t in list(denoiser.parameters()) + list(denoiser.buffers())
        if id(t) not in swapped
        for leaf in _leaf_tensors(t)
    }
    pin = device.type == "cuda"
    swap = BlockSwap(denoiser, device, [], record_moves=record_moves)
    swap._stream = torch.cuda.Stream(device) if pin else None
    for i, block in enumerate(blocks):
        if any(t.device != device for t in _frozen_tensors(block)):
            block.to(device)
        storages: dict[int, torch.UntypedStorage] = {}
        for t in _frozen_tensors(block):
            for leaf in _leaf_tensors(t):
                st = leaf.untyped_storage()
                if st.nbytes() and st.data_ptr() not in outside:
                    storages.setdefault(st.data_ptr(), st)
        host = [_host_copy(st, pin) for st in storages.values()]
        slot = _Slot(block, list(storages.values()), host, sum(h.nbytes() for h in host))
        swap.slots.append(slot)
        swap._classes.append(type(block))
        block.__dict__["_lorastudio_swap"] = swap
        block.__dict__["_lorastudio_swap_index"] = i
        block.__class__ = _swapping_class(type(block))
        swap._release(i)
    swap._model_hook = denoiser.register_forward_pre_hook(swap._on_model_start)
    swap.moves.clear()
    return swap


def _host_copy(st: torch.UntypedStorage, pin: bool) -> torch.UntypedStorage:
    """A CPU copy of a storage (page-locked when `pin`, for asynchronous copies to the GPU)."""
    host = torch.empty(st.nbytes(), dtype=torch.uint8, pin_memory=pin).untyped_storage()
    host.copy_(st)
    return host
