"""Block swap for low-VRAM plans (TrainConfig.offload_blocks).

The frozen base weights of the swapped blocks wait in pinned CPU memory; each block's device storages are emptied (`untyped_storage().resize_(0)`) and
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
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

from lorastudio.config_host import offload_problems
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.speed.compile import repeated_blocks

log = logging.getLogger(__name__)


def memory_problems(offload_blocks: int | None, device: torch.device) -> list[FieldProblem]:
    """Why `offload_blocks` cannot be honoured on `device` (empty when it can): block swap needs a
    CUDA device (config_host.offload_problems, the rule without torch)."""
    return offload_problems(offload_blocks, device.type)


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
