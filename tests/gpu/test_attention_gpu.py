"""GPU: the cuDNN attention probe at FLUX.1's real 1024 px shapes (4096 image + 512 text tokens,
24 heads of 128: where the reference run's cuDNN backward crashed), and training runs on CUDA
whose kernel is chosen by attention_backend (tiny Z-Image). Run with `pytest -m gpu tests/gpu/test_attention_gpu.py`."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from lorastudio.config import parse_train_config
from lorastudio.training.attention import choose_attention, probe_cudnn, probe_shapes, saved_attention_state
from lorastudio.training.loop import train

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
    assert choose_attention("auto", DEV, torch.bfloat16, shapes).backend == "cudnn"


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
    kernel contiguous output gradients (training.attention.contiguous_attention_grads)."""
    before = saved_attention_state()
    flash_plan, flash = _run(tiny_model, sample_dataset, "flash", family)
    cudnn_plan, cudnn = _run(tiny_model, sample_dataset, "cudnn", family)
    auto_plan, auto = _run(tiny_model, sample_dataset, "auto", family)
    assert (flash_plan.attention_backend, cudnn_plan.attention_backend) == ("flash", "cudnn")
    # auto probed the tiny model's own shapes: cuDNN, or flash with the probe's reason
    assert auto_plan.attention_backend == "cudnn" or any("cuDNN not used" in f for f in auto_plan.fallbacks)
    for losses in (cudnn, auto):
        assert losses == pytest.approx(flash, rel=2e-2)
    assert saved_attention_state() == before  # every run put torch's SDPA flags back
