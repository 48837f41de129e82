"""LoHa / LoKr layers traced whole (training/lycoris_forward.py): peft's outputs and gradients
bitwise, no draw from the global generator, one graph per block under `fullgraph=True`."""

from __future__ import annotations

import pickle

import pytest
import torch

from lorastudio.tiny.models import build
from lorastudio.training.lora import add_lora
from lorastudio.training.lycoris_forward import TRACED_ATTR, trace_friendly_lycoris


def _config(kind: str):
    from peft import LoHaConfig, LoKrConfig

    targets = ["to_q", "to_k", "to_v"]
    return (LoKrConfig if kind == "lokr" else LoHaConfig)(r=4, alpha=4.0, target_modules=targets)


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


@pytest.mark.parametrize("kind", ["lokr", "loha"])
def test_the_traced_forward_is_peft_s_bitwise_and_draws_nothing(kind: str):
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
    assert torch.equal(out, peft_out)
    assert all(torch.equal(a, b) for a, b in zip(grads, peft_grads, strict=True))
    assert trace_friendly_lycoris(block) == 3 and trace_friendly_lycoris(block) == 0  # idempotent
    assert pickle.loads(pickle.dumps(type(layers[0]))) is type(layers[0])  # saved guards find it


def test_a_lokr_block_compiles_as_one_graph():
    """peft's `torch.rand(1) > module_dropout` was a data-dependent branch: `fullgraph=True`
    raised (the saved block graphs were refused for every LoKr run on a GPU, session 38)."""
    torch._dynamo.reset()
    block = _block("lokr")
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
