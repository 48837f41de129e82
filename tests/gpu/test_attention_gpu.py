"""GPU: the cuDNN attention probe at FLUX.1's real 1024 px shapes (4096 image + 512 text tokens,
24 heads of 128: where the reference run's cuDNN backward crashed), and training runs on CUDA
whose kernel is chosen by attention_backend (tiny Z-Image). Run with `pytest -m gpu tests/gpu/test_attention_gpu.py`."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from lorastudio.config import parse_train_config
from lorastudio.training.loop import train
from lorastudio.training.speed.attention import (
    choose_attention,
    probe_cudnn,
    probe_shapes,
    saved_attention_state,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
DEV = torch.device("cuda")


def test_the_cudnn_probe_passes_at_flux_1024px_shapes_in_a_child_process():
    shapes = probe_shapes({"num_attention_heads": 24, "attention_head_dim": 128}, 4096, 512, 1)
    t0 = time.monotonic()
    reason = probe_cudnn(DEV, torch.bfloat16, shapes)
    seconds = time.monotonic() - t0
    print(f"cuDNN probe at {shapes}: {reason or 'passed'} in {seconds:.1f} s")
    assert reason is None, reason
    # with FlashAttention-4 installed, auto may find it faster (note 23)
    assert choose_attention("auto", DEV, torch.bfloat16, shapes).backend in ("cudnn", "fa4")


def _run(tiny_model, sample_dataset, backend: str, family: str) -> tuple[Any, list[float]]:
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(sample_dataset),
        "output_name": f"attention-{family}-{backend}",
        "resolution": 256,
        "batch_size": 2,
        "steps": 4,
        "learning_rate": 1e-3,
        "max_sequence_length": 32,
        "attention_backend": backend,
        "seed": 0,
    }
    events: list[Any] = []
    result = train(parse_train_config(raw), events.append, device="cuda")
    (plan,) = [e for e in events if e.type == "plan_chosen"]
    return plan, result.losses


@pytest.mark.parametrize("family", ["z-image", "flux"])
def test_runs_on_cuda_report_their_kernel_and_cudnn_trains_like_flash(tiny_model, sample_dataset, family):
    """FLUX.1 included: its compiled step crashed under cuDNN until the engine handed the
    kernel contiguous output gradients (training.speed.attention.contiguous_attention_grads)."""
    before = saved_attention_state()
    flash_plan, flash = _run(tiny_model, sample_dataset, "flash", family)
    cudnn_plan, cudnn = _run(tiny_model, sample_dataset, "cudnn", family)
    auto_plan, auto = _run(tiny_model, sample_dataset, "auto", family)
    assert (flash_plan.attention_backend, cudnn_plan.attention_backend) == ("flash", "cudnn")
    # auto probed the tiny model's own shapes: cuDNN, or flash with the probe's reason
    assert auto_plan.attention_backend in ("cudnn", "fa4") or any(
        "cuDNN not used" in f for f in auto_plan.fallbacks
    )
    for losses in (cudnn, auto):
        assert losses == pytest.approx(flash, rel=2e-2)
    assert saved_attention_state() == before  # every run put torch's SDPA flags back


def _fa4_or_skip() -> None:
    from lorastudio.training.speed.attention_fa4 import fa4_unavailable

    reason = fa4_unavailable(DEV)
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("shape", [(2, 256, 4, 64), (1, 4608, 24, 128)])  # [B, L, H, D]; FLUX.1 1024 px
def test_fa4_matches_sdpa_math_forward_and_backward_eager_and_compiled(shape):
    """FA4 through the engine's custom op against torch's fp32 math SDPA on the same bf16 inputs:
    output and q/k/v gradients within bf16 error (and no worse than 2x torch's flash kernel),
    every element finite; the compiled call (fullgraph) gives the same output and gradients within
    the same bounds (FA4's dq sums its blocks with atomics: not bit-identical run to run)."""
    _fa4_or_skip()
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from lorastudio.training.speed.attention_fa4 import fa4_attention

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        ).transpose(1, 2)

    def run(attn, q, k, v, grad):
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = attn(q, k, v)
        out.backward(grad)
        return [out.detach(), q.grad, k.grad, v.grad]

    g = torch.Generator(device=DEV).manual_seed(7)
    q, k, v, grad = (torch.randn(shape, device=DEV, dtype=torch.bfloat16, generator=g) for _ in range(4))
    with sdpa_kernel([SDPBackend.MATH]):
        want = run(sdpa, *(t.float() for t in (q, k, v, grad)))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        flash = run(sdpa, q, k, v, grad)
    got = run(fa4_attention, q, k, v, grad)
    compiled = run(torch.compile(fa4_attention, fullgraph=True), q, k, v, grad)
    for name, a, f, c, w in zip(("out", "dq", "dk", "dv"), got, flash, compiled, want, strict=True):
        err = float((a.float() - w).norm() / w.norm())
        flash_err = float((f.float() - w).norm() / w.norm())
        compiled_err = float((c.float() - w).norm() / w.norm())
        print(f"{shape} {name}: fa4 {err:.2e}, compiled {compiled_err:.2e}, flash {flash_err:.2e}")
        for e in (err, compiled_err):
            assert e < 1e-2 and e <= 2 * flash_err + 1e-4, (name, err, compiled_err, flash_err)
        assert a.isfinite().all() and c.isfinite().all()
    torch.testing.assert_close(compiled[0], got[0], rtol=0, atol=0)  # the forward is deterministic


def test_the_fa4_probe_passes_at_flux_shapes_and_a_tiny_fa4_run_trains_like_flash(tiny_model, sample_dataset):
    """The child-process probe runs FA4 and cuDNN at FLUX.1's 1024 px shapes and times both; auto
    takes whichever it found faster. Then the tiny FLUX.1 trains (compiled) with attention_backend
    "fa4" like "flash", and reports its kernel."""
    _fa4_or_skip()
    from lorastudio.training.speed.attention import pick_kernel, probe_attention

    shapes = probe_shapes({"num_attention_heads": 24, "attention_head_dim": 128}, 4096, 512, 1)
    t0 = time.monotonic()
    results = probe_attention(DEV, torch.bfloat16, shapes, ["cudnn", "fa4"])
    print(f"probe at {shapes} in {time.monotonic() - t0:.1f} s: {results} -> {pick_kernel(results)}")
    assert results["fa4"].ok and results["cudnn"].ok, results
    assert results["fa4"].ms > 0 and results["cudnn"].ms > 0
    flash_plan, flash = _run(tiny_model, sample_dataset, "flash", "flux")
    fa4_plan, fa4 = _run(tiny_model, sample_dataset, "fa4", "flux")
    assert fa4_plan.attention_backend == "fa4"
    assert fa4 == pytest.approx(flash, rel=2e-2)
