"""Fixtures of the generation tests: one CPU thread, a frozen GC generation per test (see
tests/unit/training/conftest.py), and one short FLUX.1 LoRA run shared by the module."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from lorastudio.config import parse_train_config
from lorastudio.settings import Settings
from lorastudio.training.loop import train


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _frozen_gc_generation() -> None:
    gc.freeze()


@pytest.fixture(scope="session")
def flux_lora(tiny_model: Callable[[str], Path], sample_dataset: Path, tmp_path_factory) -> Path:
    """A LoRA file of a 10-step FLUX.1 run at a high learning rate (it visibly changes images)."""
    raw = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(sample_dataset),
        "output_name": "gen-lora",
        "resolution": 32,
        "steps": 10,
        "batch_size": 4,
        "learning_rate": 1e-2,
        "lora_rank": 4,
        "max_sequence_length": 16,
    }
    settings = Settings(home=tmp_path_factory.mktemp("gen-home"))
    result = train(parse_train_config(raw), [].append, settings=settings, device="cpu")
    assert result.lora_path is not None
    return result.lora_path


@pytest.fixture(scope="module")
def flux_pipe(tiny_model):
    """The tiny FLUX.1 pipeline on the CPU, loaded once per test module."""
    from lorastudio.generate import load_pipeline

    return load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
