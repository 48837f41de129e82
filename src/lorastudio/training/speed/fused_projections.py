"""Fused same-input projections (TrainConfig.fuse_projections): a transformer block's frozen
projections that read the same input run as ONE matmul, and the LoRA adapters on them read that
input once, while peft's adapters stay on the same module names (the LoRA file is unchanged).

The groups are declared per block class by each family (FamilySpec.fused_projection_groups):
FLUX.1's double blocks and Qwen-Image's blocks: to_q / to_k / to_v (image stream) and
add_q_proj / add_k_proj / add_v_proj (text stream); FLUX.1's single blocks: proj_mlp with its
attention's to_q / to_k / to_v (all read the block's normed hidden states); Z-Image's blocks:
to_q / to_k / to_v and the SwiGLU's w1 / w3.

`fuse_projections` (before the LoRA is added) concatenates each group's frozen weights into one
`FusedFrozenProjections` holder (registered once, on the block: it moves, swaps and counts like
any linear), and replaces each member by a `FusedSlice`, an nn.Linear without a weight of its
own (so peft wraps it as a LoRA target as before) whose forward returns its slice of the
holder's output. The first member called with an input computes the whole group's matmul; the
others, called with the same tensor, take their slices; after the last one the holder forgets it
(no tensor is kept between forwards; a forward cut short between two members of a group, by
an exception or a checkpoint recompute that stops early, leaves that group's output held until
the group's next call: the members of every declared group are called back to back, before the
block's last saved tensor). `share_lora_inputs` (after the LoRA) makes a group's LoRA
members compute x [A_1; A_2; ...]^T in one matmul too (peft's maths otherwise). Under
torch.compile each group becomes one GEMM, and its backward one input-gradient GEMM.

Measured on an H200 (bench/RESULTS.md note 20), 1024 px, compiled, cuDNN attention: bf16 steps
1.7-3.4 % faster (FLUX.1 b1 0.3672 -> 0.3546 s, Qwen-Image b3 + CUDA graphs 1.0267 -> 0.9983 s,
Z-Image b2 0.503 -> 0.4945 s), FLUX.1 +3 GiB peak; an fp8 base 0.6 % slower (its GEMMs were at
their ceiling). So `auto` fuses bf16 / fp16 bases on CUDA in the plain plan (no checkpointing,
no block swap, no LoRA dropout), and `on` refuses fp8 / int8 / nf4 bases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lorastudio.config_rules import FusionChoice
from lorastudio.training.adapters.lora_saved import cast_input, kept_cast_scope

# block class name -> its groups of member module paths (FamilySpec.fused_projection_groups)
ProjectionGroups = Mapping[str, tuple[tuple[str, ...], ...]]


class FusionUnsupported(ValueError):
    """The model's projections cannot be fused as declared (nothing was changed)."""


def check_group(linears: list[torch.nn.Linear]) -> None:
    """Raise FusionUnsupported unless the linears share their input size, dtype and device."""
    k, ref = linears[0].in_features, linears[0].weight
    if any(lin.in_features != k for lin in linears):
        raise FusionUnsupported(
            f"a group's linears differ in input size: {[lin.in_features for lin in linears]}"
        )
    if any(lin.weight.dtype != ref.dtype or lin.weight.device != ref.device for lin in linears):
        raise FusionUnsupported("a group's linears differ in dtype or device")


class FusedFrozenProjections(torch.nn.Module):
    """One frozen linear [sum of N_i, K] computing a group of projections of the same input."""

    def __init__(self, linears: list[torch.nn.Linear]):
        super().__init__()
        check_group(linears)
        k, ref = linears[0].in_features, linears[0].weight
        self.linear = torch.nn.utils.skip_init(  # no random init (and no RNG draw): filled below
            torch.nn.Linear,
            k,
            sum(lin.out_features for lin in linears),
            bias=any(lin.bias is not None for lin in linears),
            device=ref.device,
            dtype=ref.dtype,
        )
        with torch.no_grad():  # written in place: one copy of the group's weights, no temporary
            torch.cat([lin.weight for lin in linears], out=self.linear.weight)  # [sum N_i, K]
            if self.linear.bias is not None:
                parts = [
                    lin.bias if lin.bias is not None else ref.new_zeros(lin.out_features) for lin in linears
                ]
                torch.cat(parts, out=self.linear.bias)
        self.linear.requires_grad_(False)
        self.sizes = [lin.out_features for lin in linears]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self._input: torch.Tensor | None = None
        self._parts: tuple[torch.Tensor, ...] | None = None
        self._served = 0
        # share_lora_inputs: the group's peft LoRA layers, their ranks and the x A^T cache
        self.lora_members: list[Any] = []
        self.lora_ranks: list[int] = []
        self._lora_input: torch.Tensor | None = None
        self._lora_parts: tuple[torch.Tensor, ...] | None = None
        self._lora_served = 0

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Projection `index` of x [..., K] -> [..., N_index]: computes the group's matmul for a
        new input, a slice of it for one already computed."""
        if self._input is not x or self._parts is None:
            out = self.linear(x)  # [..., sum N_i]
            self._input, self._parts, self._served = x, out.split(self.sizes, dim=-1), 0
        part = self._parts[index]
        self._served += 1
        if self._served >= len(self.sizes):  # every member had its slice: keep nothing
            self._input = self._parts = None
        return part


class FusedSlice(torch.nn.Linear):
    """Stands where one linear of a fused group was: same in/out features, no weight of its own
    (`weight` / `bias` are views into the holder's, for code that reads them); forward = its
    slice of the holder's group matmul."""

    fused_slice = True

    def __init__(self, holder: FusedFrozenProjections, index: int):
        torch.nn.Module.__init__(self)  # not Linear.__init__: no weight is allocated
        object.__setattr__(self, "holder", holder)  # not a child: the block registers it once
        self.index = index
        self.in_features = holder.linear.in_features
        self.out_features = holder.sizes[index]

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        start = self.holder.offsets[self.index]
        return self.holder.linear.weight[start : start + self.out_features]

    @property
    def bias(self) -> torch.Tensor | None:  # type: ignore[override]
        if self.holder.linear.bias is None:
            return None
        start = self.holder.offsets[self.index]
        return self.holder.linear.bias[start : start + self.out_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.holder.part(x, self.index)


def fuse_projections(model: torch.nn.Module, groups_by_block: ProjectionGroups) -> int:
    """Fuse, in place and before the LoRA is added, every group of `groups_by_block` (block class
    name -> member paths) in the model's blocks; returns the number of groups fused. Every group
    is checked before any is fused: raises FusionUnsupported, with the model unchanged, when the
    model has none of those blocks, or a member is missing, is not a plain nn.Linear, or
    differs from its group in input size, dtype or device."""
    found = []
    for block in model.modules():
        for i, names in enumerate(groups_by_block.get(type(block).__name__, ())):
            check_group([_member(block, name) for name in names])
            found.append((block, i, names))
    if not found:
        raise FusionUnsupported(
            f"the {type(model).__name__} has none of the blocks {sorted(groups_by_block)}"
        )
    for block, i, names in found:  # one group at a time: its separate linears go as it is fused
        holder = FusedFrozenProjections([block.get_submodule(name) for name in names])
        block.add_module(f"fused_projections_{i}", holder)
        for index, name in enumerate(names):
            parent, _, leaf = name.rpartition(".")
            setattr(block.get_submodule(parent) if parent else block, leaf, FusedSlice(holder, index))
    return len(found)


def _member(block: torch.nn.Module, name: str) -> torch.nn.Linear:
    """`block`'s member `name`, checked: a plain nn.Linear (FusionUnsupported otherwise)."""
    try:
        linear = block.get_submodule(name)
    except AttributeError:
        raise FusionUnsupported(f"{type(block).__name__} has no {name}") from None
    if type(linear) is not torch.nn.Linear:  # (the base is frozen: the holder and add_lora)
        raise FusionUnsupported(
            f"{type(block).__name__}.{name} is a {type(linear).__name__}, not a plain Linear"
        )
    return linear


def fuse_for_run(
    model: torch.nn.Module, groups_by_block: ProjectionGroups, choice: FusionChoice
) -> tuple[FusionChoice, int, list[str]]:
    """Apply a run's FusionChoice before its LoRA is added, never fatally. Returns the choice in
    effect (nothing shared when nothing was fused), the groups fused, and the notes for the
    plan's fallbacks (why less than asked is done)."""
    notes = [f"fuse_projections: {choice.note}"] if choice.note else []
    if not choice.fuse:
        return choice, 0, notes
    try:
        return choice, fuse_projections(model, groups_by_block), notes
    except FusionUnsupported as err:
        return FusionChoice(False, False), 0, [*notes, f"fuse_projections: not fused ({err})"]


def share_lora_inputs(model: torch.nn.Module, adapter: str = "default") -> int:
    """After peft's LoRA is added to a fused model (`fuse_projections` first): the LoRA members
    of each group read their input once too. The group's lora_A weights are concatenated
    ([sum r_i, K]) and multiplied with the input in ONE matmul per group and forward, and each
    member adds lora_B_i(its rank slice) * scaling_i to its base slice: peft's maths, with one
    read of the input (and, backward, one for all the A gradients) instead of one per member.
    Only for adapters without dropout (ValueError otherwise); returns the number of groups
    changed. A member whose adapter is disabled, merged or inactive runs peft's own forward."""
    members: dict[int, list[tuple[int, Any]]] = {}
    holders: dict[int, FusedFrozenProjections] = {}
    for module in model.modules():
        base = getattr(module, "base_layer", None)
        if isinstance(base, FusedSlice) and adapter in getattr(module, "lora_A", {}):
            if not isinstance(module.lora_dropout[adapter], torch.nn.Identity):
                raise ValueError("shared LoRA inputs need lora_dropout 0 (each adapter drops its own)")
            members.setdefault(id(base.holder), []).append((base.index, module))
            holders[id(base.holder)] = base.holder
    for key, group in members.items():
        group.sort(key=lambda item: item[0])
        holder = holders[key]
        holder.lora_members = [m for _, m in group]  # plain list: already registered in the blocks
        holder.lora_ranks = [m.lora_A[adapter].out_features for m in holder.lora_members]
        for slot, member in enumerate(holder.lora_members):  # slot: its place among the LoRA members
            member.__class__ = _shared_class(type(member))
            member.shared_lora_adapter, member.shared_lora_slot = adapter, slot
    return len(members)


def _lora_hidden(holder: FusedFrozenProjections, x: torch.Tensor, slot: int, adapter: str) -> torch.Tensor:
    """Member `slot`'s x A_slot^T [..., r_slot] from the group's one x [A_1; A_2; ...]^T matmul."""
    if holder._lora_input is not x or holder._lora_parts is None:
        a = torch.cat([m.lora_A[adapter].weight for m in holder.lora_members])  # [sum r_i, K]
        if torch.compiler.is_compiling():  # the cast checkpointed: recomputed, not kept
            h = torch.nn.functional.linear(cast_input(x, a.dtype), a)  # [..., sum r_i]
        else:
            with kept_cast_scope():  # autograd keeps x (bf16), not its fp32 cast (RELIABILITY 2170)
                h = torch.nn.functional.linear(cast_input(x, a.dtype), a)  # [..., sum r_i]
        holder._lora_input, holder._lora_parts, holder._lora_served = x, h.split(holder.lora_ranks, -1), 0
    part = holder._lora_parts[slot]
    holder._lora_served += 1
    if holder._lora_served >= len(holder.lora_members):  # every member had its slice: keep nothing
        holder._lora_input = holder._lora_parts = None
    return part


def _shared_forward(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """The forward of a shared LoRA member (`share_lora_inputs`): its base slice plus
    lora_B(its slice of the group's one x A^T) * scaling, peft's maths; peft's own forward for a
    disabled, merged or inactive adapter (it knows those states)."""
    adapter = self.shared_lora_adapter
    if self.disable_adapters or self.merged or adapter not in self.active_adapters:
        return self.unshared_forward(x, *args, **kwargs)
    base = self.base_layer  # the member's FusedSlice of its group's holder
    result = base(x, *args, **kwargs)  # [..., N_slot] in the base's dtype
    h = _lora_hidden(base.holder, x, self.shared_lora_slot, adapter)  # [..., r_slot] in the LoRA's dtype
    delta = self.lora_B[adapter](h) * self.scaling[adapter]  # [..., N_slot]
    return (result + delta).to(result.dtype)  # as peft adds it


_SHARED: dict[type, type] = {}


def _shared_class(cls: type) -> type:
    """The subclass of peft LoRA layer class `cls` whose forward is `_shared_forward` (one per
    class; a class already shared is returned as it is). Named `_shared_<module>_<class>` and
    kept as a global of this module, so that pickle finds it by reference: Dynamo's saved block
    graphs pickle the block's modules with their guards (training/speed/precompile.py). An instance's
    own forward made from a closure, as it was, pickled as peft's class forward without its
    closure, and every saved FLUX.1 block failed to load on the GPU (RELIABILITY 1230)."""
    if getattr(cls, "shares_lora_input", False):
        return cls
    if cls not in _SHARED:
        name = "_shared_" + "_".join(f"{cls.__module__}.{cls.__qualname__}".replace("<", "").split("."))
        attrs = {"forward": _shared_forward, "unshared_forward": cls.forward, "shares_lora_input": True}
        shared = type(name, (cls,), attrs)
        shared.__module__ = __name__
        globals()[name] = shared
        _SHARED[cls] = shared
    return _SHARED[cls]
