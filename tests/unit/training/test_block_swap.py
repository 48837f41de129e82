"""Block swap (training/planning/block_swap.py) on tiny models of every family: the same losses as without
it, at most two swapped blocks resident, in the learned block order, with quantised bases and
regional compile too. The swap bookkeeping runs on the CPU here (compute and storage device both
"cpu"); tests/gpu/test_memory_gpu.py checks it on CUDA."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from memory_cases import CPU, FAMILIES, Case, CountingBackend, assert_same

from lorastudio.errors import ConfigError
from lorastudio.training.planning.block_swap import attach_block_swap, memory_problems, swap_candidates
from lorastudio.training.planning.memory import (
    apply_checkpointing,
)
from lorastudio.training.speed.compile import compile_denoiser, compile_state, repeated_blocks

# -- block swap -----------------------------------------------------------------------------------


def test_block_swap_is_refused_off_cuda():
    (problem,) = memory_problems(2, CPU)
    assert problem.field == "offload_blocks"
    assert "block swap moves weights between CPU RAM and a GPU; this run is on the CPU" in problem.message
    assert memory_problems(0, CPU) == memory_problems(None, CPU) == []
    assert memory_problems(4, torch.device("cuda")) == []


def test_swap_candidates_are_the_last_blocks():
    case = Case("z-image")
    blocks = repeated_blocks(case.denoiser)
    assert len(blocks) == 4
    assert swap_candidates(case.denoiser, 0) == []
    assert swap_candidates(case.denoiser, 3) == blocks[1:]
    assert swap_candidates(case.denoiser, 4) == swap_candidates(case.denoiser, 99) == blocks
    with pytest.raises(ConfigError, match="offload_blocks: Sequential declares no repeated blocks"):
        swap_candidates(torch.nn.Sequential(torch.nn.Linear(2, 2)), 1)


def _storages_empty(swap: Any) -> bool:
    return all(st.nbytes() == 0 for slot in swap.slots for st in slot.storages)


@pytest.mark.parametrize("key", FAMILIES)
def test_block_swap_is_exact_and_keeps_at_most_two_blocks(key: str):
    reference = Case(key)
    expected = [reference.step(update=True) for _ in range(2)]
    case = Case(key)
    lora = [(p, p.data_ptr()) for p in case.params]
    swap = attach_block_swap(case.denoiser, swap_candidates(case.denoiser, 99), CPU)
    assert swap.blocks == repeated_blocks(case.denoiser) and swap.swapped_bytes > 0
    assert _storages_empty(swap) and swap.resident() == []
    for want in expected:
        assert_same(case.step(update=True), want, exact=True)
        assert swap.resident() == [] and _storages_empty(swap)  # all back in CPU memory
    assert 1 <= swap.max_resident <= 2
    assert all(p.requires_grad and p.data_ptr() == ptr for p, ptr in lora)  # LoRA never moved


def test_moves_follow_the_block_order_forward_then_backward():
    case = Case("flux")  # 3 repeated blocks: 1 double-stream, 2 single-stream
    swap = attach_block_swap(case.denoiser, swap_candidates(case.denoiser, 3), CPU, record_moves=True)
    case.step()
    forward = [("prefetch", 0), ("prefetch", 1), ("release", 0), ("prefetch", 2), ("release", 1)]
    backward = [("prefetch", 1), ("release", 2), ("prefetch", 0), ("release", 1), ("release", 0)]
    assert swap.moves == forward + backward  # block 2 ends the forward and starts the backward
    swap.moves.clear()
    apply_checkpointing(case.denoiser, "full")  # recomputation reloads nothing
    case.step()
    assert swap.moves == forward + backward


def test_the_block_order_is_learned_from_the_first_forward():
    case = Case("sdxl")  # the U-Net calls its mid-block after the down blocks, declared after the up blocks
    blocks = repeated_blocks(case.denoiser)
    calls: list[int] = []
    hooks = [b.register_forward_pre_hook(lambda m, a, i=i: calls.append(i)) for i, b in enumerate(blocks)]
    swap = attach_block_swap(case.denoiser, blocks, CPU, record_moves=True)
    case.step()
    assert swap.order == calls != sorted(calls)
    assert any(kind == "load" for kind, _ in swap.moves)  # mispredicted: loaded on demand
    swap.moves.clear()
    case.step()
    assert not any(kind == "load" for kind, _ in swap.moves)  # every block prefetched
    assert swap.max_resident <= 2
    for h in hooks:
        h.remove()


def test_a_forward_without_gradients_releases_each_block_after_use():
    case = Case("z-image")
    with torch.no_grad():
        noisy = torch.randn_like(case.latents)
        expected = case.family.predict(
            case.denoiser, noisy, torch.tensor([0.3, 0.7]), case.cond, case.info, case.cfg
        )
        swap = attach_block_swap(case.denoiser, swap_candidates(case.denoiser, 4), CPU, record_moves=True)
        got = case.family.predict(
            case.denoiser, noisy, torch.tensor([0.3, 0.7]), case.cond, case.info, case.cfg
        )
    assert torch.equal(got, expected)
    assert swap.resident() == [] and swap.max_resident == 2
    assert [m for m in swap.moves if m[0] == "release"] == [("release", i) for i in range(4)]


def test_detach_puts_the_weights_back_for_good():
    case = Case("qwen-image")
    reference = Case("qwen-image").step()
    blocks = repeated_blocks(case.denoiser)
    classes = [type(b) for b in blocks]
    swap = attach_block_swap(case.denoiser, blocks, CPU, record_moves=True)
    assert [type(b).__name__ for b in blocks] == [c.__name__ for c in classes]  # still found as blocks
    swap.detach()
    assert [type(b) for b in blocks] == classes
    assert all(st.nbytes() > 0 for slot in swap.slots for st in slot.storages)
    swap.moves.clear()
    assert_same(case.step(), reference, exact=True)
    assert swap.moves == []  # no longer swapping
    swap.detach()  # idempotent


def test_blocks_must_belong_to_the_denoiser():
    case = Case("flux")
    with pytest.raises(ValueError, match="distinct submodule"):
        attach_block_swap(case.denoiser, [torch.nn.Linear(2, 2)], CPU)


def test_block_swap_composes_with_regional_compile_and_checkpointing():
    reference = Case("flux")
    expected = [reference.step(update=True) for _ in range(2)]
    case = Case("flux")
    backend = CountingBackend()
    compile_denoiser(case.denoiser, case.params, backend=backend)
    apply_checkpointing(case.denoiser, "full")
    swap = attach_block_swap(case.denoiser, swap_candidates(case.denoiser, 2), CPU, record_moves=True)
    torch._dynamo.utils.counters.clear()
    for want in expected:
        assert_same(case.step(update=True), want, exact=False)
    assert compile_state(case.denoiser).active and backend.graphs > 0 and backend.runs > 0
    assert not torch._dynamo.utils.counters["graph_break"]  # the hooks stay outside the compiled calls
    assert {i for _, i in swap.moves} == {0, 1} and swap.max_resident <= 2
    assert swap.resident() == []


class _QuantisedBlock(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.scale = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))  # trainable: stays

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight) * self.scale  # [B, 64]


class _QuantisedNet(torch.nn.Module):
    _repeated_blocks = ("_QuantisedBlock",)

    def __init__(self, kind: str) -> None:
        super().__init__()
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
        from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4

        g = torch.Generator().manual_seed(0)
        weights = [torch.randn(64, 64, generator=g).to(torch.bfloat16) for _ in range(3)]
        if kind == "nf4":
            weights = [to_nf4(w, 64, 32) for w in weights]
        else:
            linears = torch.nn.ModuleList(
                torch.nn.Linear(64, 64, bias=False, dtype=torch.bfloat16) for _ in weights
            )
            for lin, w in zip(linears, weights, strict=True):
                lin.weight.data = w
            quantize_(linears, Int8WeightOnlyConfig())
            weights = [lin.weight.detach() for lin in linears]
        self.blocks = torch.nn.ModuleList(_QuantisedBlock(w) for w in weights)
        self.skip: set[int] = set()  # blocks the forward leaves out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            if i not in self.skip:
                x = block(x)
        return x


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_quantised_base_weights_are_swapped_exactly(kind: str):
    net = _QuantisedNet(kind)
    assert type(net.blocks[0].weight).__name__ in ("NF4Tensor", "Int8Tensor")
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).requires_grad_()

    def run() -> list[torch.Tensor]:
        out = net(x).float().square().sum()
        grads = torch.autograd.grad(out, [x] + [b.scale for b in net.blocks])
        return [out.detach(), *grads]

    expected = run()
    swap = attach_block_swap(net, list(net.blocks), CPU, record_moves=True)
    assert swap.swapped_bytes > 0 and _storages_empty(swap)
    got = run()
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert swap.resident() == [] and swap.max_resident == 2
    assert all(b.scale.untyped_storage().nbytes() > 0 for b in net.blocks)  # trainable: never moved


def test_storages_shared_with_the_rest_of_the_model_stay_put():
    net = _QuantisedNet("nf4")
    shared = net.blocks[2].weight.quantized_data  # an inner tensor also used outside the blocks
    net.register_buffer("outside", shared)
    swap = attach_block_swap(net, list(net.blocks), CPU)
    assert shared.untyped_storage().nbytes() > 0
    assert all(
        shared.untyped_storage().data_ptr() != st.data_ptr() for slot in swap.slots for st in slot.storages
    )
    assert len(swap.slots[2].storages) == len(swap.slots[1].storages) - 1


def test_a_mispredicted_order_loads_blocks_on_demand_and_stays_exact():
    net = _QuantisedNet("nf4")
    net.skip = {1}  # a partial pass: the order cannot be learned from it
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).requires_grad_()
    expected = torch.autograd.grad(net(x).float().sum(), x)[0]
    swap = attach_block_swap(net, list(net.blocks), CPU, record_moves=True)
    swap.order = [2, 1, 0]  # wrong: the prefetches bring blocks that are not used next
    got = torch.autograd.grad(net(x).float().sum(), x)[0]
    assert torch.equal(got, expected)
    assert ("load", 0) in swap.moves[swap.moves.index(("release", 2)) :]  # block 0 for its backward
    assert swap.resident() == [] and swap.max_resident <= 2
