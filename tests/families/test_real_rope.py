"""Real-arithmetic RoPE for Qwen-Image and Z-Image (families/real_rope.py): the same values as
diffusers' complex paths, installed by each family's load_denoiser, and no complex op left in
the graphs torch.compile hands to its backend (what Inductor cannot generate code for)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from diffusers import QwenImageTransformer2DModel, ZImageTransformer2DModel
from diffusers.models.transformers import transformer_qwenimage as qwen

from lorastudio import families
from lorastudio.families.real_rope import (
    rotate_pairs,
    use_complex_rope,
    use_complex_rope_processors,
    use_real_rope,
    use_real_rope_processors,
)
from lorastudio.families.z_image_attention import RealRopeZImageAttnProcessor
from lorastudio.tiny.qwen_image import qwen_image_transformer, qwen_image_transformer_inputs
from lorastudio.tiny.z_image import z_image_transformer, z_image_transformer_inputs


@pytest.fixture
def complex_rope() -> Iterator[None]:
    """Start from diffusers' own rotation; afterwards put back whichever was installed."""
    before = qwen.apply_rotary_emb_qwen
    use_complex_rope()
    yield
    qwen.apply_rotary_emb_qwen = before


def _tiny_transformer() -> QwenImageTransformer2DModel:
    return qwen_image_transformer(0).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_real_rotation_matches_the_complex_one(dtype: torch.dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 24, 3, 16, generator=g).to(dtype)  # [B, S, H, D]
    angles = torch.randn(24, 8, generator=g) * 10
    freqs = torch.polar(torch.ones_like(angles), angles)  # [S, D/2] complex64
    expected = qwen.apply_rotary_emb_qwen(x, freqs, use_real=False)
    got = rotate_pairs(x, freqs)
    assert got.dtype == dtype and got.shape == x.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6 if dtype == torch.float32 else 0)


def test_the_family_installs_it_and_the_model_output_is_unchanged(complex_rope, tmp_path):
    model, inputs = _tiny_transformer(), qwen_image_transformer_inputs()
    with torch.no_grad():
        complex_out = model(**inputs).sample  # [B, tokens, 64]
    model.save_pretrained(tmp_path / "transformer")
    assert not hasattr(qwen.apply_rotary_emb_qwen, "_lorastudio_complex_rotary_emb")
    loaded = families.get("qwen-image").load_denoiser(str(tmp_path), None, torch.float32, torch.device("cpu"))
    assert hasattr(qwen.apply_rotary_emb_qwen, "_lorastudio_complex_rotary_emb")  # installed
    assert use_real_rope() is True and qwen.apply_rotary_emb_qwen._lorastudio_complex_rotary_emb  # idempotent
    with torch.no_grad():
        real_out = loaded(**inputs).sample
    torch.testing.assert_close(real_out, complex_out, rtol=1e-5, atol=1e-6)
    # the real-valued path (use_real=True) of the same function still goes to diffusers' code
    cos, sin = torch.ones(5, 8), torch.zeros(5, 8)
    x = torch.randn(1, 2, 5, 8)  # [B, H, S, D] as that path takes it
    torch.testing.assert_close(qwen.apply_rotary_emb_qwen(x, (cos, sin), use_real=True), x)


def _complex_nodes(model: torch.nn.Module, blocks: list[torch.nn.Module], inputs: dict) -> list[str]:
    """Compile the model's blocks with a backend that records the forward and backward graphs
    AOTAutograd produces (what Inductor would lower); returns the ops producing complex values."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    found: list[str] = []

    def record(gm: torch.fx.GraphModule, _inputs: list) -> torch.fx.GraphModule:
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if node.op == "call_function" and isinstance(val, torch.Tensor) and val.is_complex():
                found.append(str(node.target))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    for block in blocks:
        block.compile(backend=aot_autograd(fw_compiler=record, bw_compiler=record), fullgraph=True)
    model.requires_grad_(True)
    out = model(**inputs)[0]
    torch.stack(list(out)).square().mean().backward()
    torch._dynamo.reset()
    return found


@pytest.mark.slow  # compiles the blocks on the CPU
def test_compiled_blocks_hold_no_complex_op_with_the_real_rope(complex_rope):
    model = _tiny_transformer()
    assert _complex_nodes(
        model, model.transformer_blocks, qwen_image_transformer_inputs()
    )  # diffusers': complex ops
    use_real_rope()
    model = _tiny_transformer()
    assert _complex_nodes(model, model.transformer_blocks, qwen_image_transformer_inputs()) == []


def _tiny_z_image() -> ZImageTransformer2DModel:
    return z_image_transformer(0).eval()


def test_z_image_processors_give_the_same_output(tmp_path):
    model, inputs = _tiny_z_image(), z_image_transformer_inputs()
    with torch.no_grad():
        complex_out = torch.stack(model(**inputs)[0])  # [B, C, 1, h, w]
    model.save_pretrained(tmp_path / "transformer")
    loaded = families.get("z-image").load_denoiser(str(tmp_path), None, torch.float32, torch.device("cpu"))
    processors = [m.processor for m in loaded.modules() if hasattr(m, "processor")]
    assert len(processors) == 4 and all(type(p) is RealRopeZImageAttnProcessor for p in processors)
    with torch.no_grad():
        real_out = torch.stack(loaded(**inputs)[0])
    torch.testing.assert_close(real_out, complex_out, rtol=1e-5, atol=1e-6)
    assert use_complex_rope_processors(loaded) == 4 and use_real_rope_processors(loaded) == 4


def _z_blocks(model: ZImageTransformer2DModel) -> list[torch.nn.Module]:
    return [*model.noise_refiner, *model.context_refiner, *model.layers]


@pytest.mark.slow  # compiles the blocks on the CPU
def test_compiled_z_image_blocks_hold_no_complex_op_with_the_real_processors():
    model = _tiny_z_image()
    assert _complex_nodes(
        model, _z_blocks(model), z_image_transformer_inputs()
    )  # diffusers' processor: complex ops
    model = _tiny_z_image()
    use_real_rope_processors(model)
    assert _complex_nodes(model, _z_blocks(model), z_image_transformer_inputs()) == []


def test_only_a_verified_z_image_processor_is_replaced(monkeypatch):
    """The installed diffusers' processor is the verified one (a new diffusers fails here: check
    RealRopeZImageAttnProcessor against its __call__, then add its digest); another is kept."""
    from diffusers.models.transformers.transformer_z_image import ZSingleStreamAttnProcessor

    from lorastudio.families import real_rope

    assert real_rope.source_digest(ZSingleStreamAttnProcessor.__call__) in real_rope.Z_IMAGE_VERIFIED_CALLS
    monkeypatch.setattr(real_rope, "Z_IMAGE_VERIFIED_CALLS", frozenset({"0" * 16}))
    model = _tiny_z_image()
    assert use_real_rope_processors(model) == 0
    assert all(
        type(m.processor) is ZSingleStreamAttnProcessor for m in model.modules() if hasattr(m, "processor")
    )


def test_an_unknown_qwen_rotation_is_left_alone(monkeypatch):
    def other(x, freqs_cis, use_real=True):  # a signature real_rope was not written against
        return x

    monkeypatch.setattr(qwen, "apply_rotary_emb_qwen", other)
    assert use_real_rope() is False and qwen.apply_rotary_emb_qwen is other
