"""GPU: compile "wide" (SDXL) through the real `train()`: the U-Net's wide regions compiled with
static shapes and CUDA graphs train with the eager losses (bf16), sample previews run eagerly in
between, and with checkpointing the graphs are left off with the reason in the plan. Skipped
without CUDA; run with `pytest -m gpu tests/gpu`."""

from __future__ import annotations

import pytest
import torch

from lorastudio.config import parse_train_config
from lorastudio.training.loop import train
from lorastudio.training.speed.compile import compile_state

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _run(tiny_model, sample_dataset, compile_mode: str, checkpointing: str = "auto"):
    cfg = parse_train_config(
        {
            "family": "sdxl",
            "base_model": str(tiny_model("sdxl")),
            "data_dir": str(sample_dataset),
            "output_name": f"wide-{compile_mode}-{checkpointing}",
            "resolution": 64,
            "steps": 4,
            "batch_size": 2,
            "learning_rate": 1e-3,
            "compile": compile_mode,
            "gradient_checkpointing": checkpointing,
            "sample_prompts": ["a red circle on a blue background"],
            "sample_every": 2,
            "sample_steps": 2,
        }
    )
    events: list = []
    result = train(cfg, events.append, device="cuda", return_denoiser=True)
    plan = next(e for e in events if e.type == "plan_chosen")
    return result, plan, events


def test_wide_compile_with_cuda_graphs_trains_like_eager(tiny_model, sample_dataset):
    eager, _, _ = _run(tiny_model, sample_dataset, "off")
    wide, plan, events = _run(tiny_model, sample_dataset, "wide")
    state = compile_state(wide.denoiser)
    assert plan.compile and state is not None and state.active and state.cuda_graphs, plan.fallbacks
    assert not [f for f in plan.fallbacks if f.startswith("compile")]
    assert [e for e in events if e.type == "sample_ready"]  # previews ran (eagerly) between steps
    for e, w in zip(eager.losses, wide.losses, strict=True):
        assert w == pytest.approx(e, rel=2e-2)  # bf16, fused and reordered kernels


def test_wide_compile_with_checkpointing_leaves_cuda_graphs_off(tiny_model, sample_dataset):
    result, plan, _ = _run(tiny_model, sample_dataset, "wide", checkpointing="full")
    state = compile_state(result.denoiser)
    assert state is not None and state.active and not state.cuda_graphs
    assert any("CUDA graphs off: full activation checkpointing" in f for f in plan.fallbacks)
    assert all(torch.isfinite(torch.tensor(result.losses)))
