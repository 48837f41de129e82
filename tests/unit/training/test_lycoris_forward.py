"""LoHa / LoKr layers traced whole (training/adapters/lycoris_forward.py): peft's outputs and gradients
(LoHa bitwise where peft's delta is cheaper, else from its Khatri-Rao factors without the full
weight; LoKr from its two factors without the Kronecker weight; both within fp rounding), no draw
from the global generator, one graph per block under `fullgraph=True`."""

from __future__ import annotations

import pickle

import pytest
import torch

from lorastudio.tiny.models import build
from lorastudio.training.adapters.lora import add_lora
from lorastudio.training.adapters.lycoris_forward import (
    TRACED_ATTR,
    loha_linear_delta,
    lokr_linear_delta,
    trace_friendly_lycoris,
)


def _config(kind: str):
    """kind: lokr, loha (rank 4 on the tiny 32 x 32 projections: 16 * 64 is not below 32 * 32,
    peft's delta) or loha2 (rank 2: the factored delta)."""
    from peft import LoHaConfig, LoKrConfig

    targets = ["to_q", "to_k", "to_v"]
    if kind == "lokr":
        return LoKrConfig(r=4, alpha=4.0, target_modules=targets)
    return LoHaConfig(r=2 if kind == "loha2" else 4, alpha=4.0, target_modules=targets)


def _block(kind: str) -> torch.nn.Module:
    """The tiny FLUX.1's first single block with the adapter (non-zero, so it changes the output)."""
    transformer = build("flux", 0).transformer.train()
    torch.manual_seed(0)
    params = add_lora(transformer, _config(kind))
    with torch.no_grad():
        for p in params:
            p.normal_(std=0.05)
    return transformer.single_transformer_blocks[0]


def _run(block: torch.nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    dim = block.norm.linear.in_features
    hidden = torch.randn(1, 10, dim, generator=g)  # [B, L, D]
    context = torch.randn(1, 6, dim, generator=g)  # [B, T, D]
    temb = torch.randn(1, dim, generator=g)  # [B, D]
    head_dim = block.attn.head_dim if hasattr(block.attn, "head_dim") else dim // block.attn.heads
    rope = (torch.ones(16, head_dim), torch.zeros(16, head_dim))  # cos, sin: [T + L, head_dim]
    for p in block.parameters():
        p.grad = None
    out = block(hidden_states=hidden, encoder_hidden_states=context, temb=temb, image_rotary_emb=rope)[1]
    out.square().mean().backward()
    grads = [p.grad.clone() for p in block.parameters() if p.requires_grad]
    return out.detach(), grads


@pytest.mark.parametrize("kind", ["lokr", "loha", "loha2"])
def test_the_traced_forward_is_peft_s_and_draws_nothing(kind: str):
    block = _block(kind)
    layers = [m for m in block.modules() if getattr(type(m), TRACED_ATTR, False)]
    assert len(layers) == 3  # add_lora moved every adapted layer
    out, grads = _run(block)
    state = torch.get_rng_state()
    _run(block)
    assert torch.equal(torch.get_rng_state(), state)  # peft's forward drew rand(1) per layer
    for layer in layers:  # back to peft's own class: the same numbers
        layer.__class__ = type(layer).__mro__[2]
        assert not getattr(type(layer), TRACED_ATTR, False)
    peft_out, peft_grads = _run(block)
    if kind == "loha":  # the same operations in the same order
        assert torch.equal(out, peft_out)
        assert all(torch.equal(a, b) for a, b in zip(grads, peft_grads, strict=True))
    else:  # LoKr, LoHa at rank 2: the same sum from the factors, in another order
        torch.testing.assert_close(out, peft_out, rtol=1e-5, atol=1e-6)
        for a, b in zip(grads, peft_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert trace_friendly_lycoris(block) == 3 and trace_friendly_lycoris(block) == 0  # idempotent
    assert pickle.loads(pickle.dumps(type(layers[0]))) is type(layers[0])  # saved guards find it


@pytest.mark.parametrize("kind", ["lokr", "loha2"])
def test_a_lycoris_block_compiles_as_one_graph(kind: str):
    """peft's `torch.rand(1) > module_dropout` was a data-dependent branch: `fullgraph=True`
    raised (the saved block graphs were refused for every LoKr run on a GPU, session 38); the
    factored LoHa delta traces whole too."""
    torch._dynamo.reset()
    block = _block(kind)
    eager_out, _ = _run(block)
    compiled = torch.compile(block, backend="eager", fullgraph=True)
    out, _ = _run(compiled)
    torch.testing.assert_close(out, eager_out, rtol=1e-6, atol=1e-6)


def test_disabled_adapters_and_module_dropout_keep_peft_s_forward():
    block = _block("lokr")
    layer = next(m for m in block.modules() if getattr(type(m), TRACED_ATTR, False))
    x = torch.randn(2, layer.base_layer.in_features)
    layer._disable_adapters = True  # as training/preservation.py does
    assert torch.equal(layer(x), layer.base_layer(x))
    layer._disable_adapters = False
    layer.module_dropout["default"] = 0.5
    state = torch.get_rng_state()
    layer(x)
    assert not torch.equal(torch.get_rng_state(), state)  # peft's own forward: its draw


def _adapted_linear(config, dim_in: int, dim_out: int) -> torch.nn.Module:
    """A linear [dim_in -> dim_out] with peft's adapter of `config` (draw-free forward, factors
    drawn from N(0, 0.1) so that it changes the output)."""
    from peft import inject_adapter_in_model

    torch.manual_seed(0)
    model = inject_adapter_in_model(config, torch.nn.Sequential(torch.nn.Linear(dim_in, dim_out)))
    trace_friendly_lycoris(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lokr" in name or "hada" in name:
                p.normal_(std=0.1)
    return model[0]


def _lokr_linear(dim_in: int, dim_out: int, factor: int, both: bool) -> torch.nn.Module:
    from peft import LoKrConfig

    config = LoKrConfig(r=4, alpha=3.0, target_modules=["0"], decompose_factor=factor, decompose_both=both)
    return _adapted_linear(config, dim_in, dim_out)


@pytest.mark.parametrize(("dim_in", "dim_out", "factor", "both"), [
    (64, 64, -1, False), (48, 96, -1, False), (96, 40, 2, False), (64, 48, 4, True), (96, 40, 16, True),
])  # fmt: skip
def test_a_lokr_linear_s_output_comes_from_its_factors_without_the_kronecker_weight(
    dim_in: int, dim_out: int, factor: int, both: bool
):
    """peft built kron(w1, w2), an [out, in] matrix per layer and step, and kept it for the
    backward: a LoKr step cost a second full matmul per adapted layer (RESULTS note 53: 1.4-1.5x
    the LoRA step at 1024 px, Qwen-Image's did not fit 80 GB)."""
    from torch.utils.flop_counter import FlopCounterMode

    layer = _lokr_linear(dim_in, dim_out, factor, both)
    x = torch.randn(3, 7, dim_in)  # [B, L, in]
    saved: list[tuple[int, ...]] = []
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t)
    with hooks, FlopCounterMode(display=False) as ours:
        delta = lokr_linear_delta(layer, "default", x)
    with FlopCounterMode(display=False) as peft_count:
        reference = layer._get_delta_activations("default", x)
    torch.testing.assert_close(delta, reference, rtol=1e-5, atol=1e-7)
    assert not {(dim_out, dim_in), (dim_in, dim_out)} & set(saved)  # no full-size weight (or W^T) kept
    # fewer FLOPs; at the default factor (-1: both factors near the square root) a fraction
    assert ours.get_total_flops() * (3 if factor == -1 else 1) < peft_count.get_total_flops()
    layer.scaling["default"] *= 0.5  # generation's LoRA strength (peft's set_scale) is read per call
    torch.testing.assert_close(lokr_linear_delta(layer, "default", x), reference * 0.5, rtol=1e-5, atol=1e-7)


def test_rank_dropout_in_training_keeps_peft_s_delta():
    layer = _lokr_linear(64, 64, -1, False).train()
    layer.rank_dropout["default"] = 0.5
    assert lokr_linear_delta(layer, "default", torch.randn(2, 64)) is None
    layer.eval()
    assert lokr_linear_delta(layer, "default", torch.randn(2, 64)) is not None


def _loha_linear(dim_in: int, dim_out: int, rank: int) -> torch.nn.Module:
    from peft import LoHaConfig

    return _adapted_linear(LoHaConfig(r=rank, alpha=3.0, target_modules=["0"]), dim_in, dim_out)


@pytest.mark.parametrize(
    ("dim_in", "dim_out", "rank"), [(64, 64, 4), (48, 160, 4), (160, 40, 3), (256, 256, 8)]
)
def test_a_loha_linear_s_output_comes_from_its_khatri_rao_factors_without_the_full_weight(
    dim_in: int, dim_out: int, rank: int
):
    """peft built W = s (w1_a w1_b) * (w2_a w2_b), an [out, in] matrix per layer and step, and
    kept it for the backward: a second full matmul per adapted layer each way. (A1 B1) * (A2 B2)
    is A B with A [out, r*r], B [r*r, in] (row-wise Khatri-Rao products): W x = A (B x)."""
    from torch.utils.flop_counter import FlopCounterMode

    layer = _loha_linear(dim_in, dim_out, rank)
    params = [p for n, p in layer.named_parameters() if "hada" in n]
    x = torch.randn(3, 7, dim_in, requires_grad=True)  # [B, L, in]
    saved: list[tuple[int, ...]] = []
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t)
    with hooks, FlopCounterMode(display=False) as ours:
        delta = loha_linear_delta(layer, "default", x)
        grads = torch.autograd.grad(delta.square().sum(), [x, *params])
    with FlopCounterMode(display=False) as peft_count:
        reference = layer._get_delta_activations("default", x)
        want = torch.autograd.grad(reference.square().sum(), [x, *params])
    torch.testing.assert_close(delta, reference, rtol=1e-5, atol=1e-7)
    for got, exp in zip(grads, want, strict=True):
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-6)
    assert not {(dim_out, dim_in), (dim_in, dim_out)} & set(saved)  # no full-size weight (or W^T) kept
    assert ours.get_total_flops() * 2 < peft_count.get_total_flops()  # forward and backward
    layer.scaling["default"] *= 0.5  # generation's LoRA strength (peft's set_scale) is read per call
    torch.testing.assert_close(loha_linear_delta(layer, "default", x), reference * 0.5, rtol=1e-5, atol=1e-7)


def test_a_loha_linear_keeps_peft_s_delta_where_the_factors_cost_more_or_do_not_apply():
    from peft import LoHaConfig, inject_adapter_in_model

    x = torch.randn(2, 64)
    assert loha_linear_delta(_loha_linear(64, 64, 16), "default", x) is None  # 256 * 128 >= 64 * 64
    assert loha_linear_delta(_loha_linear(64, 64, 4), "default", x) is not None  # 16 * 128 < 64 * 64
    assert lokr_linear_delta(_loha_linear(64, 64, 4), "default", x) is None  # LoKr's path is LoKr's
    assert loha_linear_delta(_lokr_linear(64, 64, -1, False), "default", x) is None
    layer = _loha_linear(64, 64, 4).train()
    layer.rank_dropout["default"] = 0.5
    assert loha_linear_delta(layer, "default", x) is None  # rank dropout in training: peft's draw
    conv = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3))
    config = LoHaConfig(r=2, alpha=2.0, target_modules=["0"], use_effective_conv2d=True)
    conv_layer = inject_adapter_in_model(config, conv)[0]  # the CP (hada_t1 / hada_t2) form
    assert "default" in conv_layer.hada_t1 and loha_linear_delta(conv_layer, "default", x) is None
