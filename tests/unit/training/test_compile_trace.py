"""Pinned attention-processor signatures (training/speed/compile_trace.py): the same signature and
calls, the same graphs and loss compiled, and every family's compiled blocks covered."""

from __future__ import annotations

import inspect
import pickle

import pytest
import torch

from lorastudio.tiny.models import build
from lorastudio.training.speed.compile import compile_denoiser, repeated_blocks
from lorastudio.training.speed.compile_trace import PINNED_ATTR, pin_processor_signatures


def _denoiser(key: str) -> torch.nn.Module:
    pipe = build(key, 0)
    return pipe.unet if key == "sdxl" else pipe.transformer


def _processors(denoiser: torch.nn.Module) -> list[object]:
    return [
        m.processor
        for b in repeated_blocks(denoiser)
        for m in b.modules()
        if getattr(m, "processor", None) is not None
    ]


@pytest.mark.parametrize("key", ["sdxl", "flux", "qwen-image", "z-image"])
def test_every_familys_block_processors_are_pinned_with_their_own_signature(key: str):
    denoiser = _denoiser(key)
    processors = _processors(denoiser)
    before = [(type(p), str(inspect.signature(p.__call__))) for p in processors]
    assert processors and pin_processor_signatures(repeated_blocks(denoiser)) == len(processors)
    for p, (cls, signature) in zip(processors, before, strict=True):
        pinned = type(p).__dict__["__call__"]
        assert isinstance(p, cls) and type(p).__name__.endswith(cls.__name__)
        # pickle finds the class by its name (Dynamo's saved guards hold the processor: precompile.py)
        assert pickle.loads(pickle.dumps(type(p))) is type(p) and type(p).__qualname__ == type(p).__name__
        assert getattr(type(p), PINNED_ATTR)
        # inspect.signature takes the carried one as it is: nothing is rebuilt when it is traced
        assert inspect.signature(pinned) is pinned.__signature__
        assert str(inspect.signature(p.__call__)) == signature
    assert pin_processor_signatures(repeated_blocks(denoiser)) == 0  # idempotent


def test_a_pinned_processor_computes_what_the_original_does():
    torch.manual_seed(0)
    eager = _denoiser("flux").eval()
    pinned = _denoiser("flux").eval()
    pin_processor_signatures(repeated_blocks(pinned))
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(1, 16, eager.config.in_channels, generator=g)  # [B, L, C]
    context = torch.randn(1, 6, eager.config.joint_attention_dim, generator=g)  # [B, T, D]
    pooled = torch.randn(1, eager.config.pooled_projection_dim, generator=g)  # [B, Dp]
    ids = torch.zeros(16, 3)
    kwargs = dict(
        hidden_states=hidden, encoder_hidden_states=context, pooled_projections=pooled,
        timestep=torch.tensor([0.5]), img_ids=ids, txt_ids=torch.zeros(6, 3), return_dict=False,
    )  # fmt: skip
    if eager.config.guidance_embeds:
        kwargs["guidance"] = torch.tensor([3.5])
    with torch.no_grad():
        torch.testing.assert_close(pinned(**kwargs)[0], eager(**kwargs)[0], rtol=0, atol=0)


def test_compiled_flux_keeps_two_graphs_and_no_graph_break():
    """compile_denoiser pins the processors; Dynamo traces the blocks whole (a graph break would
    add graphs) and the loss is the eager one."""
    from tests.unit.training.test_compile import _Case

    torch._dynamo.reset()
    case = _Case(batch=1)
    eager_loss, _ = case.step()
    compile_denoiser(case.denoiser, case.params, backend="eager")
    assert all(getattr(type(p), PINNED_ATTR, False) for p in _processors(case.denoiser))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled_loss, _ = case.step()
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 2
    assert not torch._dynamo.utils.counters["graph_break"]
