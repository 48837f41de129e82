"""A LoRA file gets the permissions of the run's other outputs (the umask's), not the 0600 of
safetensors' own writer (issue 30)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from lorastudio.lora.files import process_umask, write_lora_file


@pytest.fixture
def umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_lora_file_follows_the_umask(mask: int, mode: int, tmp_path: Path, umask: None) -> None:
    os.umask(mask)
    assert process_umask() == mask
    lora = write_lora_file(tmp_path / "a.safetensors", {"x.lora_A.weight": torch.zeros(2, 4)}, {})
    sidecar = tmp_path / "a.json"
    sidecar.write_text("{}")
    assert stat.S_IMODE(lora.stat().st_mode) == mode == stat.S_IMODE(sidecar.stat().st_mode)
