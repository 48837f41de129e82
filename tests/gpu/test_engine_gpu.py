"""GPU: the real `train()` path on CUDA for every family (tiny models): bf16 base, regional
compile (auto = on with CUDA), fused projections (auto = on for the transformers), sample
previews, a checkpoint, stop-and-save, then a resume that finishes the run. Skipped without CUDA; run with `pytest -m gpu tests/gpu`."""

from __future__ import annotations

import json

import pytest
import torch

from lorastudio import families
from lorastudio.config import parse_train_config
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def paired_dataset(sample_dataset, tmp_path_factory):
    """The sample dataset with a control image per target (its colour inverse): what the edit
    families need (Qwen-Image-Edit refuses a target without one before any load)."""
    from paired_dataset import with_controls

    return with_controls(sample_dataset, tmp_path_factory.mktemp("paired") / "pairs")


@pytest.mark.parametrize("family", families.names())
def test_train_stop_resume_on_cuda(family, tiny_model, sample_dataset, paired_dataset):
    spec = families.get(family).spec
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(paired_dataset if spec.edit_model else sample_dataset),
        "output_name": f"gpu-{family}",
        "resolution": max(32, 2 * spec.resolution_multiple),
        "steps": 6,
        "batch_size": 2,
        "learning_rate": 1e-3,
        "save_every": 2,
        "sample_prompts": ["a red circle on a blue background"],
        "sample_steps": 2,
    }
    if "max_sequence_length" in spec.supports:
        raw["max_sequence_length"] = 32
    cfg = parse_train_config(raw)
    events: list = []
    done = {"steps": 0}

    def stop_after_three():
        return StopRequest(save=True) if done["steps"] >= 3 else None

    def emit(event):
        events.append(event)
        if event.type == "progress":
            done["steps"] = event.step

    first = train(cfg, emit, stop_after_three, device="cuda")
    # the pipelined loop reads step 3 while step 4 is queued: the stop lands after step 4
    assert first.stopped and first.steps_run == 4
    assert all(torch.isfinite(torch.tensor(first.losses)))
    run_dir = get_settings().outputs_dir / f"gpu-{family}"
    second = train(cfg, events.append, device="cuda", resume=run_dir)
    assert not second.stopped and second.steps_run == 6 and second.lora_path is not None
    assert second.losses[:4] == first.losses
    sidecar = json.loads(second.lora_path.with_suffix(".json").read_text())
    assert sidecar["steps"] == 6
    samples = [e for e in events if e.type == "sample_ready"]
    assert samples and all((run_dir / p).is_file() for e in samples for p in e.images)
    assert max(e.peak_memory_gb for e in events if e.type == "progress") > 0
    plans = [e for e in events if e.type == "plan_chosen"]
    fused = bool(spec.fused_projection_groups)  # fuse_projections auto: CUDA, bf16, plain plan
    assert len(plans) == 2 and all((p.fused_projections > 0) == fused for p in plans)
