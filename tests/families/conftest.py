"""Fixtures of the family contract suite: one CPU thread and a frozen GC generation per test
(see tests/unit/training/conftest.py for why), and the 4-image overfitting dataset."""

from __future__ import annotations

import gc
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


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
def four_images(sample_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 4 images of the sample dataset with their captions."""
    out = tmp_path_factory.mktemp("four") / "four"
    out.mkdir()
    for img in sorted(sample_dataset.glob("*.png"))[:4]:
        shutil.copy(img, out / img.name)
        shutil.copy(img.with_suffix(".txt"), out / f"{img.stem}.txt")
    return out
