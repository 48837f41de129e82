"""Probe prototype (`fb` in bench/probe_speed.py): a transformer's frozen projections that read
the same input run as ONE matmul, while the LoRA adapters stay peft's own, on the same module
names.

Groups that share an input (GROUPS, by block class): FLUX.1's double blocks and Qwen-Image's
blocks: to_q / to_k / to_v (image stream) and add_q_proj / add_k_proj / add_v_proj (text
stream); FLUX.1's single blocks: proj_mlp with its attention's to_q / to_k / to_v (all read the
block's normed hidden states); Z-Image's blocks: to_q / to_k / to_v and the SwiGLU's w1 / w3.
Each group's frozen weights are concatenated into one `FusedFrozenProjections` holder
(registered once, on the block: it moves, converts to fp8 and counts like any linear), and each
member is replaced by a `FusedSlice`, an nn.Linear
without its own weight (so peft wraps it as a LoRA target as before) whose forward returns its
slice of the holder's output. The first member called with an input computes the whole group's
matmul; the others, called with the same tensor, take their slices of it; after the last one
the holder forgets it (no tensor is kept between forwards). Under torch.compile the group
becomes one GEMM, and its backward one input-gradient GEMM over the concatenated gradients.
"""

from __future__ import annotations

from typing import Any

import torch

_DUAL_STREAM = (
    ("attn.to_q", "attn.to_k", "attn.to_v"),
    ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
)
GROUPS: dict[str, tuple[tuple[str, ...], ...]] = {  # block class name -> its input-sharing groups
    "FluxTransformerBlock": _DUAL_STREAM,
    "FluxSingleTransformerBlock": (("proj_mlp", "attn.to_q", "attn.to_k", "attn.to_v"),),
    "QwenImageTransformerBlock": _DUAL_STREAM,
    "ZImageTransformerBlock": (
        ("attention.to_q", "attention.to_k", "attention.to_v"),
        ("feed_forward.w1", "feed_forward.w3"),
    ),
}


class FusedFrozenProjections(torch.nn.Module):
    """One frozen linear [sum of N_i, K] computing a group of projections of the same input."""

    def __init__(self, linears: list[torch.nn.Linear]):
        super().__init__()
        k = linears[0].in_features
        if any(lin.in_features != k for lin in linears):
            raise ValueError("a fused group's linears must share their input size")
        weight = torch.cat([lin.weight.detach() for lin in linears])  # [sum N_i, K]
        has_bias = [lin.bias is not None for lin in linears]
        self.linear = torch.nn.Linear(
            k, weight.shape[0], bias=any(has_bias), device=weight.device, dtype=weight.dtype
        )
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            if self.linear.bias is not None:
                parts = [
                    lin.bias.detach() if lin.bias is not None else weight.new_zeros(lin.out_features)
                    for lin in linears
                ]
                self.linear.bias.copy_(torch.cat(parts))
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


def fuse_projections(model: Any) -> int:
    """Fuse every group of the model's blocks (GROUPS) in place, before the LoRA is added;
    returns the number of groups. Raises ValueError for a model with none of those blocks."""
    groups = 0
    for block in list(model.modules()):
        for i, names in enumerate(GROUPS.get(type(block).__name__, ())):
            linears = [block.get_submodule(name) for name in names]
            holder = FusedFrozenProjections(linears)
            block.add_module(f"fused_projections_{i}", holder)
            for index, name in enumerate(names):
                parent, _, leaf = name.rpartition(".")
                setattr(block.get_submodule(parent) if parent else block, leaf, FusedSlice(holder, index))
            groups += 1
    if not groups:
        raise ValueError(f"{type(model).__name__} has no blocks with input-sharing projections to fuse")
    return groups


def share_lora_inputs(model: Any, adapter: str = "default") -> int:
    """After peft's LoRA is added to a fused model (`fuse_projections` first): the LoRA members
    of each group read their input once too. The group's lora_A weights are concatenated
    ([sum r_i, K]) and multiplied with the input in ONE matmul per group and forward, and each
    member adds lora_B_i(its rank slice) * scaling_i to its base slice: peft's maths, with one
    read of the input (and, backward, one for all the A gradients) instead of one per member.
    Only for adapters without dropout; returns the number of groups changed."""
    from types import MethodType

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
        for slot, member in enumerate(holder.lora_members):
            member.forward = MethodType(_shared_lora_forward(holder, slot, adapter), member)
    return len(members)


def _lora_hidden(holder: FusedFrozenProjections, x: torch.Tensor, slot: int, adapter: str) -> torch.Tensor:
    """Member `slot`'s x A_slot^T [..., r_slot] from the group's one x [A_1; A_2; ...]^T matmul."""
    if holder._lora_input is not x or holder._lora_parts is None:
        a = torch.cat([m.lora_A[adapter].weight for m in holder.lora_members])  # [sum r_i, K]
        h = torch.nn.functional.linear(x.to(a.dtype), a)  # [..., sum r_i]
        holder._lora_input, holder._lora_parts, holder._lora_served = x, h.split(holder.lora_ranks, -1), 0
    part = holder._lora_parts[slot]
    holder._lora_served += 1
    if holder._lora_served >= len(holder.lora_members):  # every member had its slice: keep nothing
        holder._lora_input = holder._lora_parts = None
    return part


def _shared_lora_forward(holder: FusedFrozenProjections, slot: int, adapter: str) -> Any:
    def forward(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        result = self.base_layer(x, *args, **kwargs)  # [..., N_slot] in the base's dtype
        h = _lora_hidden(holder, x, slot, adapter)  # [..., r_slot] in the LoRA's dtype
        delta = self.lora_B[adapter](h) * self.scaling[adapter]  # [..., N_slot]
        return (result + delta).to(result.dtype)  # as peft adds it

    return forward
