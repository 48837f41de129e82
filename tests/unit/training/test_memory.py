"""Activation checkpointing modes (training/planning/memory.py) on tiny models of every family: the same
losses and gradients as without them, the selective policy really recomputes only the cheap ops,
and selective falls back to full on regionally compiled blocks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from memory_cases import FAMILIES, Case, CountingBackend, assert_same
from torch.utils._python_dispatch import TorchDispatchMode

from lorastudio.errors import ConfigError
from lorastudio.training.planning.memory import (
    SELECTIVE_ON_COMPILED,
    adapter_inner_dim,
    apply_checkpointing,
    checkpointing_mode,
)
from lorastudio.training.speed.compile import compile_denoiser, compile_state, repeated_blocks

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
        assert_same(case.step(), reference, exact=False)
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
    assert adapter_inner_dim(case.denoiser) == 4
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


def test_selective_on_compiled_blocks_falls_back_to_full(caplog):
    reference = Case("flux").step()
    case = Case("flux")
    compile_denoiser(case.denoiser, case.params, backend=CountingBackend())
    with caplog.at_level("WARNING", logger="lorastudio.training.planning.memory"):
        assert apply_checkpointing(case.denoiser, "selective") == [SELECTIVE_ON_COMPILED]
    assert checkpointing_mode(case.denoiser) == "full"
    assert caplog.text.count("selective checkpointing -> full") == 1
    assert_same(case.step(), reference, exact=False)
    assert caplog.text.count("selective checkpointing -> full") == 1  # already reported: not again


def test_blocks_compiled_after_selective_checkpointing_are_checkpointed_in_full(caplog):
    case = Case("flux")
    assert apply_checkpointing(case.denoiser, "selective") == []
    backend = CountingBackend()
    compile_denoiser(case.denoiser, case.params, backend=backend)
    assert checkpointing_mode(case.denoiser) == "full"
    with caplog.at_level("WARNING", logger="lorastudio.training.planning.memory"):
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

    from lorastudio.training.planning.memory import compute_heavy_policy

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
