"""GPU: issue 28's loss, save_dtype and SDXL text-encoder LoRA on the real CUDA path (tiny SDXL,
bf16 base, regional compile, the pipelined loop): a scheduled Huber loss with min-SNR, a bf16 LoRA
file with both CLIP encoders' LoRA that passes the loader check, stop-and-save and a resume that
finishes the run; then the file applied by generation. Run with `pytest -m gpu tests/gpu`."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.config import parse_train_config
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_huber_bf16_file_and_text_encoder_lora_on_cuda(tiny_model, sample_dataset):
    raw = {
        "family": "sdxl",
        "base_model": str(tiny_model("sdxl")),
        "data_dir": str(sample_dataset),
        "output_name": "gpu-methods",
        "resolution": 64,
        "steps": 6,
        "batch_size": 2,
        "learning_rate": 1e-2,
        "loss": "huber",
        "huber_schedule": "snr",
        "save_dtype": "bf16",
        "train_text_encoder": True,
        "text_encoder_lr": 5e-3,
        "sample_prompts": ["a red circle"],
        "sample_steps": 2,
    }
    cfg = parse_train_config(raw)
    events: list = []
    done = {"steps": 0}

    def emit(event):
        events.append(event)
        if event.type == "progress":
            done["steps"] = event.step

    first = train(cfg, emit, lambda: StopRequest(save=True) if done["steps"] >= 3 else None, device="cuda")
    assert first.stopped and all(torch.isfinite(torch.tensor(first.losses)))
    run_dir = get_settings().outputs_dir / "gpu-methods"
    second = train(cfg, events.append, device="cuda", resume=run_dir)
    assert second.steps_run == 6 and second.losses[: first.steps_run] == first.losses
    tensors = load_file(str(second.lora_path))
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    for prefix in ("lora_te1_", "lora_te2_"):
        ups = [t for k, t in tensors.items() if k.startswith(prefix) and "lora_up" in k]
        assert ups and max(float(t.abs().max()) for t in ups) > 0  # each encoder trained
    loaders = json.loads(second.lora_path.with_suffix(".json").read_text())["loaders"]
    assert loaders["comfyui"]["ok"] and loaders["diffusers"]["ok"], loaders
    assert [e for e in events if e.type == "sample_ready"]
    pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cuda")
    apply_loras(pipe, [(second.lora_path, 1.0)])
    image = generate_image(
        pipe, "sdxl", prompt="a red circle", seed=0, steps=2, width=64, height=64, extra=None
    )
    assert image.size == (64, 64)
