"""peft's LoRA / DoRA layers keep their input as it came (bf16) for the backward, not the fp32
copy their forward casts it to.

peft's lora.Linear (and DoRA's variant, the conv layers, the quantised-base layers: every forward
that goes through `_cast_input_dtype`) casts the bf16 input to the fp32 adapter's dtype before
lora_A, and autograd keeps that fp32 copy for lora_A's weight gradient: twice the bf16 input's
bytes per adapted layer and step, where the frozen base layer keeps no activation (its weight
only): 48 MiB per FLUX.1 3072-wide projection at [1, 4096, 3072], 240 MiB per 15360-wide
single-block proj_out, eager and under Inductor's min-cut partition (RELIABILITY 2080 measured
it, 2170 removes it). The fused-projection path's shared LoRA input (training/speed/fused_projections.py,
`_lora_hidden`) cast once per group and kept the same copy.

The bf16 -> fp32 cast is exact, so casting the kept bf16 input again in the backward gives the
very tensor autograd kept, bit for bit: outputs and gradients stay bitwise peft's.

- Eager: `keep_lora_inputs` moves each peft LoRA layer to a subclass of its class (one per class,
  `_kept_<module>_<class>`, a global of this module so that pickle finds it by reference, as
  training/adapters/lycoris_forward.py does) whose forward runs peft's own forward inside
  `kept_cast_scope`: the casts made by `_cast_input_dtype` in it are noted, and a
  saved_tensors_hooks pair replaces every saved tensor that is (a view of) such a cast by the bf16
  input and the view's geometry; the unpack casts again and takes the same view. peft's forward,
  graph and backward formulas are untouched: only what is held between them changes. The input's
  version is checked at unpack (an in-place change after the forward raises, as a saved tensor
  would). Where other saved-tensor hooks are active (a non-reentrant or selective activation
  checkpoint, activation offload: they decide what is kept) or grad is off, peft's forward runs
  as it is.
- Compiled (`torch.compiler.is_compiling()`): the hooks cannot be traced, so `_cast_input_dtype`
  returns the cast from inside a non-reentrant `torch.utils.checkpoint` (Dynamo tags it for
  recomputation, Inductor's partitioner keeps the bf16 input and recomputes the cast alone, the
  cheapest recompute: the matmuls are not redone), as 2080's LoHa path does.

`KEEP_BF16_INPUT = False` (bench/probe_speed.py's `keep32` part) restores the fp32 copy.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from lorastudio.training.adapters.layer_classes import swap_layer_classes

KEEP_BF16_INPUT = True  # False: autograd keeps the fp32 copy (before RELIABILITY 2170)
KEPT_ATTR = "_lorastudio_kept_input"

_LOCAL = threading.local()  # .scopes: the open kept_cast_scope lists of (input, cast) pairs


@dataclass(frozen=True)
class _Recast:
    """A saved view of a cast of `source`: cast it again and take the same view at unpack."""

    source: torch.Tensor
    version: int
    dtype: torch.dtype
    cast_stride: tuple[int, ...]
    size: torch.Size
    stride: tuple[int, ...]
    offset: int


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype)


def _storage_key(t: torch.Tensor) -> tuple[torch.device, int]:
    return t.device, t.untyped_storage().data_ptr()


def _pack(casts: list[tuple[torch.Tensor, torch.Tensor]], t: torch.Tensor) -> Any:
    """A saved tensor of the scope: a _Recast where it shares the storage of a noted cast (a plain
    strided tensor: a quantised base's tensor subclass has no storage to compare, and is kept)."""
    plain = type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided
    if plain and t.device.type != "meta" and t.numel() > 0:
        key = _storage_key(t)
        for source, cast in casts:
            if _storage_key(cast) == key:
                return _Recast(
                    source,
                    source._version,
                    cast.dtype,
                    tuple(cast.stride()),
                    t.size(),
                    tuple(t.stride()),
                    t.storage_offset(),
                )
    return t


def _unpack(saved: Any) -> torch.Tensor:
    """The tensor a _pack stood for: the input cast again (exact), viewed as it was saved."""
    if not isinstance(saved, _Recast):
        return saved
    if saved.source._version != saved.version:
        raise RuntimeError(
            "a LoRA layer's input was modified in place after its forward; its backward needs it "
            f"as it was (version {saved.version}, now {saved.source._version}): "
            "training/adapters/lora_saved.py keeps the input, not a copy"
        )
    cast = _cast(saved.source, saved.dtype)
    if tuple(cast.stride()) != saved.cast_stride:  # x.to() preserves strides: never expected
        raise RuntimeError(
            f"a LoRA input cast again has strides {tuple(cast.stride())}, not {saved.cast_stride}"
        )
    return cast.as_strided(saved.size, saved.stride, saved.offset)


def _other_hooks_active() -> bool:
    """Whether saved-tensor hooks (a checkpoint's, activation offload's) are active already."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


@contextmanager
def kept_cast_scope() -> Iterator[bool]:
    """Within: the casts noted by `cast_input` are held as their bf16 input by autograd (see the
    module). Yields whether the scope is active (eager, grad on, no other saved-tensor hooks,
    KEEP_BF16_INPUT); inactive, nothing changes."""
    if (
        not KEEP_BF16_INPUT
        or torch.compiler.is_compiling()
        or not torch.is_grad_enabled()
        or _other_hooks_active()
    ):
        yield False
        return
    casts: list[tuple[torch.Tensor, torch.Tensor]] = []  # held while open: no storage reused
    scopes = _LOCAL.__dict__.setdefault("scopes", [])
    scopes.append(casts)
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: _pack(casts, t), _unpack):
            yield True
    finally:
        scopes.pop()
        casts.clear()  # every saved tensor holds the hooks (pack's closure too): no cast kept


def cast_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x cast to `dtype` (the adapter's) for the LoRA matmuls: compiled, a checkpointed cast that
    the partitioner recomputes; eager, the plain cast, noted in the innermost open
    `kept_cast_scope` (if any) so that autograd keeps x in its place. x itself when the dtypes
    match."""
    if x.dtype == dtype:
        return x
    if not KEEP_BF16_INPUT:
        return _cast(x, dtype)
    if torch.compiler.is_compiling():
        return checkpoint(_cast, x, dtype, use_reentrant=False, preserve_rng_state=False)
    cast = _cast(x, dtype)
    scopes = getattr(_LOCAL, "scopes", None)
    if scopes:
        scopes[-1].append((x, cast))
    return cast


class _KeptInputForward:
    """Mixed in front of a peft LoRA layer class (see the module)."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if torch.compiler.is_compiling():  # no hooks to trace: cast_input checkpoints the cast
            return super().forward(x, *args, **kwargs)  # type: ignore[misc]
        with kept_cast_scope():
            return super().forward(x, *args, **kwargs)  # type: ignore[misc]

    def _cast_input_dtype(self, x: Any, dtype: torch.dtype) -> Any:
        """peft's cast (None and disabled casting included), through `cast_input`."""
        if x is None or not getattr(self, "cast_input_dtype_enabled", True):
            return super()._cast_input_dtype(x, dtype)  # type: ignore[misc]
        return cast_input(x, dtype)


def keep_lora_inputs(model: torch.nn.Module) -> int:
    """Give every peft LoRA / DoRA layer of `model` the kept-input forward (see the module).
    Idempotent; returns how many layers this call changed (0 for LoHa / LoKr models)."""
    from peft.tuners.lora.layer import LoraLayer

    return swap_layer_classes(model, LoraLayer, _KeptInputForward, KEPT_ATTR, "_kept_", sys.modules[__name__])
