"""A run's sample previews against generation with the LoRA files it wrote (tiny FLUX.1, CPU):
the preview of step N is the image `generate` renders with that step's file at the preview's
settings (prompt, seed, size, steps, guidance), pixel for pixel, and the same request twice
renders the same pixels (RELIABILITY 695)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.config import parse_train_config
from lorastudio.generate import apply_loras, generate_image
from lorastudio.settings import Settings
from lorastudio.training.loop import train

PROMPT = {"prompt": "a dog", "seed": 5, "width": 48, "height": 32, "guidance": 4.0}


@pytest.fixture(scope="module")
def dropout_run(tiny_model: Callable[[str], Path], sample_dataset: Path, tmp_path_factory) -> Path:
    """The folder of a 2-step FLUX.1 run with lora_dropout 0.5, a snapshot and a preview at step 1
    and 2 (the final LoRA)."""
    raw = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(sample_dataset),
        "output_name": "parity",
        "resolution": 32,
        "steps": 2,
        "batch_size": 2,
        "learning_rate": 1e-2,
        "lora_rank": 4,
        "lora_dropout": 0.5,
        "max_sequence_length": 16,
        "sample_prompts": [PROMPT],
        "sample_every": 1,
        "sample_steps": 2,
        "save_lora_every": 1,
    }
    settings = Settings(home=tmp_path_factory.mktemp("parity-home"))
    result = train(parse_train_config(raw), [].append, settings=settings, device="cpu")
    assert result.lora_path is not None
    return result.lora_path.parent


def _render(pipe, lora: Path) -> np.ndarray:
    apply_loras(pipe, [(lora, 1.0)])
    image = generate_image(
        pipe, "flux", prompt=PROMPT["prompt"], seed=PROMPT["seed"], steps=2, width=PROMPT["width"],
        height=PROMPT["height"], guidance=PROMPT["guidance"], extra={"max_sequence_length": 16},
    )  # fmt: skip
    return np.asarray(image, dtype=np.int16)


def _sample(run_dir: Path, step: int) -> np.ndarray:
    return np.asarray(Image.open(run_dir / f"samples/step-{step:06d}-0.png"), dtype=np.int16)


def test_a_lora_trained_with_dropout_renders_its_previews_and_the_same_pixels_twice(flux_pipe, dropout_run):
    """peft injected the LoRA's dropout in train mode into the eval-mode pipeline: each render
    dropped a random half of the LoRA (the global RNG, not the seed), so the same request gave
    other pixels and neither matched the preview."""
    snapshot = dropout_run / "loras/parity-step-000001.safetensors"
    final = dropout_run / "parity.safetensors"
    first = _render(flux_pipe, snapshot)
    np.testing.assert_array_equal(first, _sample(dropout_run, 1))
    np.testing.assert_array_equal(_render(flux_pipe, snapshot), first)
    np.testing.assert_array_equal(_render(flux_pipe, final), _sample(dropout_run, 2))
    np.testing.assert_array_equal(_render(flux_pipe, final), _sample(dropout_run, 2))
    apply_loras(flux_pipe, [])
