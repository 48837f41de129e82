"""Activation checkpointing modes and block swap (training/memory.py, training/block_swap.py) on tiny models of every
family: the same losses and gradients as without them, the selective policy really recomputes
only the cheap ops, and block swap keeps at most two swapped blocks resident, in the learned block
order, with quantised bases and regional compile too. The swap bookkeeping runs on the CPU here
(compute and storage device both "cpu"); tests/gpu/test_memory_gpu.py checks it on CUDA."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.tiny.models import build
from lorastudio.training.block_swap import attach_block_swap, memory_problems, swap_candidates
from lorastudio.training.compile import compile_denoiser, compile_state, repeated_blocks
from lorastudio.training.lora import add_lora, lora_config_for
from lorastudio.training.memory import (
    SELECTIVE_ON_COMPILED,
    apply_checkpointing,
    checkpointing_mode,
    lora_rank,
)
from lorastudio.training.noise import make_objective
from lorastudio.training.step import forward_backward

CPU = torch.device("cpu")
FAMILIES = ["sdxl", "flux", "qwen-image", "z-image"]
RES = 32
_PIPES: dict[str, tuple[Any, TrainConfig, dict[str, Any]]] = {}


def _pipe(key: str) -> tuple[Any, TrainConfig, dict[str, Any]]:
    """The tiny pipeline of `key` (built once), its config and the collated conditioning."""
    if key not in _PIPES:
        fam = families.get(key)
        pipe = build(key, 0)
        extra = {"max_sequence_length": 16} if "max_sequence_length" in fam.spec.supports else {}
        cfg = TrainConfig(
            family=key,
            base_model="tiny",
            data_dir="tiny",
            lora_rank=4,
            lora_alpha=4.0,
            resolution=RES,
            **extra,
        )
        cond = fam.collate_conditioning(fam.encode_prompts(pipe, ["a red circle", "a blue square"], cfg))
        _PIPES[key] = (pipe, cfg, cond)
    return _PIPES[key]


class Case:
    """A fresh copy of a family's tiny denoiser with LoRA (non-zero B), a fixed batch and an SGD
    step: `step()` = forward + backward (+ update) -> (loss, gradients)."""

    def __init__(self, key: str) -> None:
        pipe, self.cfg, self.cond = _pipe(key)
        self.family = families.get(key)
        self.objective = make_objective(self.family, self.cfg, dict(pipe.scheduler.config))
        self.denoiser = copy.deepcopy(pipe.unet if key == "sdxl" else pipe.transformer).train()
        torch.manual_seed(0)
        self.params = add_lora(self.denoiser, lora_config_for(self.cfg, self.family.spec.lora_targets))
        with torch.no_grad():
            for p in self.params:
                p.normal_(std=0.05)
        h = RES // self.family.spec.vae_scale_factor
        g = torch.Generator().manual_seed(1)
        self.latents = torch.randn(2, self.family.spec.latent_channels, h, h, generator=g)  # [B, C, h, w]
        self.info = {
            "original_size": [(RES, RES)] * 2,
            "crop_top_left": [(0, 0)] * 2,
            "target_size": (RES, RES),
        }
        self.optimizer = torch.optim.SGD(self.params, lr=0.1)

    def step(self, update: bool = False) -> tuple[float, list[torch.Tensor]]:
        self.optimizer.zero_grad(set_to_none=True)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        share = forward_backward(
            self.family, self.denoiser, self.objective, self.latents, self.cond, self.info, self.cfg,
            torch.Generator().manual_seed(5), 2, scaler,
        )  # fmt: skip
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in self.params]
        if update:
            self.optimizer.step()
        return float(share), grads


def _assert_same(
    a: tuple[float, list[torch.Tensor]], b: tuple[float, list[torch.Tensor]], exact: bool
) -> None:
    if exact:
        assert a[0] == b[0]
        assert all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))
    else:
        assert a[0] == pytest.approx(b[0], rel=1e-6)
        for x, y in zip(a[1], b[1], strict=True):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)


# -- activation checkpointing -----------------------------------------------------------------------


def _recording(func: Any, seen: list[torch.nn.Module]) -> Any:
    """`func` (a model's checkpoint function), noting each block it checkpoints in `seen`."""

    def run(block: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        seen.append(block)
        return func(block, *args, **kwargs)

    return run


@pytest.mark.parametrize("key", FAMILIES)
def test_checkpointing_modes_give_the_loss_and_gradients_of_off(key: str):
    reference = Case(key).step()
    for mode in ("full", "selective"):
        case = Case(key)
        assert apply_checkpointing(case.denoiser, mode) == []
        assert checkpointing_mode(case.denoiser) == mode
        checkpointed: list[torch.nn.Module] = []
        for module in case.denoiser.modules():
            if getattr(module, "gradient_checkpointing", False):
                module._gradient_checkpointing_func = _recording(
                    module._gradient_checkpointing_func, checkpointed
                )
        _assert_same(case.step(), reference, exact=False)
        assert {id(b) for b in repeated_blocks(case.denoiser)} <= {id(b) for b in checkpointed}


def test_off_auto_and_unknown_modes():
    case = Case("flux")
    assert apply_checkpointing(case.denoiser, "auto") == [] and checkpointing_mode(case.denoiser) == "off"
    apply_checkpointing(case.denoiser, "full")
    assert apply_checkpointing(case.denoiser, "auto") == [] and checkpointing_mode(case.denoiser) == "full"
    assert apply_checkpointing(case.denoiser, "off") == [] and checkpointing_mode(case.denoiser) == "off"
    assert not case.denoiser.is_gradient_checkpointing
    with pytest.raises(ConfigError, match="gradient_checkpointing: unknown mode 'most'"):
        apply_checkpointing(case.denoiser, "most")


class _OpCounter(TorchDispatchMode):
    """Counts every ATen op that runs under it (by overload packet name)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _backward_ops(mode: str) -> tuple[Counter[str], int]:
    """The ops run by the backward of one tiny FLUX.1 step with checkpointing `mode`, and how many
    LoRA up-projections (lora_B) the repeated blocks ran in the forward."""
    case = Case("flux")
    assert lora_rank(case.denoiser) == 4
    apply_checkpointing(case.denoiser, mode)
    ups = [
        m.lora_B["default"]
        for b in repeated_blocks(case.denoiser)
        for m in b.modules()
        if hasattr(m, "lora_B")
    ]
    calls: list[int] = []
    hooks = [up.register_forward_hook(lambda *_: calls.append(1)) for up in ups]
    noised = case.objective.noise(case.latents, torch.Generator().manual_seed(5))
    pred = case.family.predict(
        case.denoiser, noised.noisy, noised.noise_level, case.cond, case.info, case.cfg
    )
    for h in hooks:
        h.remove()
    loss = ((pred.float() - noised.target) ** 2).mean()
    with _OpCounter() as counter:
        loss.backward()
    return counter.ops, len(calls)


def test_selective_recomputes_the_cheap_ops_and_keeps_the_heavy_matmuls():
    (off, _), (full, _), (selective, lora_ups) = [_backward_ops(m) for m in ("off", "full", "selective")]
    # forward-only ops in a backward = recomputation: none without checkpointing
    assert off["native_layer_norm"] == off["gelu"] == 0
    assert selective["native_layer_norm"] == full["native_layer_norm"] > 0  # norms recomputed
    assert selective["gelu"] == full["gelu"] > 0  # activations recomputed
    # attention and the base matmuls: recomputed by full checkpointing, kept by selective, which
    # recomputes only the rank-4 LoRA up-projections (one mm each)
    attention = [n for n in full if n.startswith("_scaled_dot_product") and "backward" not in n]
    assert attention and all(selective[n] == off[n] == 0 for n in attention)
    matmuls = [sum(ops[n] for n in ("mm", "addmm", "bmm")) for ops in (off, selective, full)]
    assert lora_ups > 0 and matmuls[1] == matmuls[0] + lora_ups < matmuls[2]


class _CountingBackend:
    """A torch.compile backend that runs the captured graph eagerly and counts graphs and runs."""

    def __init__(self) -> None:
        self.graphs = 0
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1

        def run(*args: Any) -> Any:
            self.runs += 1
            return gm.forward(*args)

        return run


def test_selective_on_compiled_blocks_falls_back_to_full(caplog):
    reference = Case("flux").step()
    case = Case("flux")
    compile_denoiser(case.denoiser, case.params, backend=_CountingBackend())
    with caplog.at_level("WARNING", logger="lorastudio.training.memory"):
        assert apply_checkpointing(case.denoiser, "selective") == [SELECTIVE_ON_COMPILED]
    assert checkpointing_mode(case.denoiser) == "full"
    assert caplog.text.count("selective checkpointing -> full") == 1
    _assert_same(case.step(), reference, exact=False)
    assert caplog.text.count("selective checkpointing -> full") == 1  # already reported: not again


def test_blocks_compiled_after_selective_checkpointing_are_checkpointed_in_full(caplog):
    case = Case("flux")
    assert apply_checkpointing(case.denoiser, "selective") == []
    backend = _CountingBackend()
    compile_denoiser(case.denoiser, case.params, backend=backend)
    assert checkpointing_mode(case.denoiser) == "full"
    with caplog.at_level("WARNING", logger="lorastudio.training.memory"):
        loss, _ = case.step()
    assert "selective checkpointing -> full" in caplog.text
    assert backend.runs > 0 and compile_state(case.denoiser).active
    assert loss == pytest.approx(Case("flux").step()[0], rel=1e-6)


class _MlpBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))  # [B, 32]


@pytest.mark.slow
def test_selective_policy_cannot_see_inside_an_inductor_compiled_block():
    """The evidence for the fallback: under the selective policy, an Inductor-compiled block shows
    only its extern matmul calls (the fused norm/activation kernels never reach the policy), and
    keeping those fails: Inductor reuses the buffers they write into."""
    from torch._dynamo.utils import counters
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    from lorastudio.training.memory import compute_heavy_policy

    block = _MlpBlock()
    seen: Counter[str] = Counter()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        if not ctx.is_recompute:
            seen[op.overloadpacket.__name__] += 1
        return compute_heavy_policy(0)(ctx, op, *args, **kwargs)

    def contexts() -> Any:
        return create_selective_checkpoint_contexts(policy)

    x = torch.randn(4, 32, requires_grad=True)
    expected = torch.autograd.grad(checkpoint(block, x, use_reentrant=False, context_fn=contexts).sum(), x)
    assert {"native_layer_norm", "gelu", "addmm"} <= set(seen)  # eager: every op
    seen.clear()
    counters.clear()
    block.compile(backend="inductor")
    out = checkpoint(block, x, use_reentrant=False, context_fn=contexts).sum()
    assert counters["stats"]["unique_graphs"] >= 1  # really compiled
    assert seen and "native_layer_norm" not in seen and "gelu" not in seen  # fused: invisible
    with pytest.raises(RuntimeError, match="cached during selective activation checkpoint has been mutated"):
        torch.autograd.grad(out, x)
    got = torch.autograd.grad(checkpoint(block, x, use_reentrant=False).sum(), x)  # full: fine
    torch.testing.assert_close(got, expected)


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
        _assert_same(case.step(update=True), want, exact=True)
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
    _assert_same(case.step(), reference, exact=True)
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
    backend = _CountingBackend()
    compile_denoiser(case.denoiser, case.params, backend=backend)
    apply_checkpointing(case.denoiser, "full")
    swap = attach_block_swap(case.denoiser, swap_candidates(case.denoiser, 2), CPU, record_moves=True)
    torch._dynamo.utils.counters.clear()
    for want in expected:
        _assert_same(case.step(update=True), want, exact=False)
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
