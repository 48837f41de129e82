"""Fixtures of the LoRA-file tests: one CPU thread, a frozen GC generation per test (see
tests/unit/training/conftest.py for why), and the linear/conv layers of each tiny denoiser."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from lorastudio import families


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _frozen_gc_generation() -> None:
    gc.freeze()


_shapes: dict[str, dict[str, tuple[int, ...]]] = {}


@pytest.fixture
def layer_shapes(tiny_model: Callable[[str], Path]) -> Callable[[str], dict[str, tuple[int, ...]]]:
    """layer_shapes(family) -> {module name: weight shape} of every Linear/Conv2d of the tiny
    denoiser (the layers a LoRA can target)."""

    def get(family: str) -> dict[str, tuple[int, ...]]:
        if family not in _shapes:
            family_ = families.get(family)
            denoiser = family_.load_denoiser(
                str(tiny_model(family)), None, torch.float32, torch.device("cpu")
            )
            _shapes[family] = {
                n: tuple(m.weight.shape)
                for n, m in denoiser.named_modules()
                if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))
            }
        return _shapes[family]

    return get
