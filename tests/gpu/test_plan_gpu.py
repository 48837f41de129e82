"""GPU: the memory-budget chooser on CUDA with the real CudaMeter (tiny FLUX.1): the plans it
measures, the one it picks, block swap among the candidates, and the run's own peak within the
budget. Skipped without CUDA; run with `pytest -m gpu tests/gpu/test_plan_gpu.py`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.training.loop import train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _config(tiny_model, sample_dataset, name: str, **overrides: Any):
    raw = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(sample_dataset),
        "output_name": name,
        "resolution": 512,  # activations well above the allocator's block sizes
        "batch_size": 4,
        "steps": 3,
        "learning_rate": 1e-3,
        "max_sequence_length": 32,
        "compile": "off",  # the run's peak is then the measured plan's
        **overrides,
    }
    return parse_train_config(raw)


def _plan(events: list[Any]):
    (plan,) = [e for e in events if e.type == "plan_chosen"]
    return plan


def test_a_budget_on_cuda_picks_a_lighter_plan_and_the_run_stays_within_it(tiny_model, sample_dataset):
    large: list[Any] = []
    train(
        _config(tiny_model, sample_dataset, "gpu-large", memory_budget_gb=100.0), large.append, device="cuda"
    )
    plain = _plan(large)
    (trial,) = plain.trials
    assert (plain.base_precision, plain.gradient_checkpointing, plain.offload_blocks) == ("bf16", "off", 0)
    assert trial.fits and trial.peak_memory_gb > 0 and plain.decided_by == "measured"

    with pytest.raises(ConfigError) as err:
        train(
            _config(tiny_model, sample_dataset, "gpu-none", memory_budget_gb=1e-4), [].append, device="cuda"
        )
    message = err.value.problems[0].message
    lightest = float(message.split("smallest measured peak was ")[1].split(" GB")[0])
    assert lightest < trial.peak_memory_gb

    budget = (lightest + trial.peak_memory_gb) / 2
    events: list[Any] = []
    result = train(
        _config(tiny_model, sample_dataset, "gpu-mid", memory_budget_gb=budget), events.append, device="cuda"
    )
    chosen = _plan(events)
    fitting = [t for t in chosen.trials if t.fits]
    assert fitting and all(t.peak_memory_gb <= budget for t in fitting)
    fastest = min(fitting, key=lambda t: t.seconds_per_sample)
    assert (
        chosen.base_precision,
        chosen.gradient_checkpointing,
        chosen.offload_blocks,
        chosen.micro_batch_size,
    ) == (
        fastest.base_precision,
        fastest.gradient_checkpointing,
        fastest.offload_blocks,
        fastest.micro_batch_size,
    )
    peaks = [e.peak_memory_gb for e in events if e.type == "progress"]
    assert peaks and max(peaks) <= budget  # allocated during the run <= reserved in its trial
    assert all(torch.isfinite(torch.tensor(result.losses)))


def _wide_flux(tiny_model, tmp_path: Path) -> Path:
    """The tiny FLUX.1 pipeline with a wider transformer (1024 wide, 6 single blocks of ~30 MB in
    bf16): the tiny one's blocks (a few kB) are too small for block swap to move its peak."""
    from diffusers import FluxTransformer2DModel

    folder = tmp_path / "wide-flux"
    shutil.copytree(tiny_model("flux"), folder)
    shutil.rmtree(folder / "transformer")
    torch.manual_seed(0)
    FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=1, num_single_layers=6, attention_head_dim=128,
        num_attention_heads=8, joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=True,
        axes_dims_rope=(16, 56, 56),
    ).save_pretrained(folder / "transformer")  # fmt: skip
    return folder


def test_block_swap_is_a_candidate_on_cuda(tiny_model, sample_dataset, tmp_path):
    """With the precision and checkpointing fixed, the chain is micro-batches then block swap:
    a budget below every micro-batch plan must be met by offloading blocks."""
    fixed = {
        "base_model": str(_wide_flux(tiny_model, tmp_path)),
        "base_precision": "bf16",
        "gradient_checkpointing": "full",
        "micro_batch_size": 1,
    }
    floor: list[Any] = []
    train(
        _config(tiny_model, sample_dataset, "gpu-floor", memory_budget_gb=100.0, **fixed),
        floor.append,
        device="cuda",
    )
    no_swap_peak = _plan(floor).trials[0].peak_memory_gb
    events: list[Any] = []
    try:
        train(
            _config(tiny_model, sample_dataset, "gpu-swap", memory_budget_gb=0.97 * no_swap_peak, **fixed),
            events.append,
            device="cuda",
        )
    except ConfigError as err:
        pytest.fail(f"block swap could not lower the peak of the wide model by 3%: {err}")
    chosen = _plan(events)
    assert chosen.offload_blocks > 0 and chosen.decided_by == "measured"
    assert any(t.offload_blocks > 0 and t.fits for t in chosen.trials)
