"""Qwen-Image-Edit previews see their references at the size the run trains them (RELIABILITY 1490):
QwenImageEditPipeline.__call__ VAE-encoded every reference at ~1 MP whatever size it was handed,
so a preview of a run at control_resolution 64 encoded a 1024 x 1024 reference (and put ~4,100
reference tokens through every step: ~4 minutes a round of CPU on the tiny model instead of
seconds). A hook on the VAE's encode records every encoded size; a size past the run's refuses at
once (the old code's round fails in a second, not in minutes). Generate told the run's
control_resolution renders the preview's pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio import families
from lorastudio.data.control_sizing import control_size
from lorastudio.generate import generate_image, load_pipeline
from lorastudio.settings import Settings
from lorastudio.training.loop import train

FAMILY, SIDE = "qwen-image-edit", 64


@pytest.fixture
def encodes(monkeypatch) -> list[tuple[int, int]]:
    """(width, height) of every pixel batch the Qwen-Image VAE encodes from now on; a side over
    twice SIDE raises (the ~1 MP reference of the old previews)."""
    from diffusers import AutoencoderKLQwenImage

    seen: list[tuple[int, int]] = []
    original = AutoencoderKLQwenImage.encode

    def encode(self, x, *args, **kwargs):
        seen.append((x.shape[-1], x.shape[-2]))  # x [B, 3, 1, H, W]
        if max(x.shape[-2:]) > 2 * SIDE:
            raise AssertionError(f"a {x.shape[-1]}x{x.shape[-2]} encode at control_resolution {SIDE}")
        return original(self, x, *args, **kwargs)

    monkeypatch.setattr(AutoencoderKLQwenImage, "encode", encode)
    return seen


def test_a_preview_encodes_its_reference_at_the_runs_size_and_generate_agrees(
    make_config, small_pairs: Path, tiny_model, tmp_path, encodes
) -> None:
    control = sorted((small_pairs / "control").glob("*.png"))[0]
    with Image.open(control) as image:
        reference = image.convert("RGB")
    size = control_size(families.get(FAMILY).spec.control_sizing, SIDE, *reference.size)
    prompt = {"prompt": "make it blue", "controls": [f"control/{control.name}"], "seed": 3}
    cfg = make_config(
        FAMILY, control_resolution=SIDE, steps=1, sample_prompts=[prompt], sample_steps=2, output_name="qprev"
    )
    events: list = []
    result = train(cfg, events.append, settings=Settings(home=tmp_path), device="cpu", return_denoiser=True)
    ready = [e for e in events if e.type == "sample_ready"]
    assert [len(e.images) for e in ready] == [1]
    # phase 2 encodes the targets (32 px) and controls (the run's size); the round, its one reference
    assert encodes[-1] == size and all(max(s) <= max(size) for s in encodes)
    round_encodes = len(encodes)

    pipe = load_pipeline(str(tiny_model(FAMILY)), FAMILY, device="cpu")
    pipe.transformer = result.denoiser  # the LoRA as trained
    generated = generate_image(
        pipe, FAMILY, prompt="make it blue", seed=3, steps=2, width=32, height=32,
        controls=[reference], control_resolution=SIDE,
    )  # fmt: skip
    assert encodes[round_encodes:] == [size]  # one encode of the one reference, at the run's size
    with Image.open(result.lora_path.parent / ready[0].images[0]) as image:
        preview = np.asarray(image.convert("RGB"), dtype=np.int16)
    assert np.abs(preview - np.asarray(generated, dtype=np.int16)).max() <= 1
