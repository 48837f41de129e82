"""check_lora_values (the generation worker's check of every request's LoRAs) reads an unchanged
file once; a file rewritten in place is checked again, so a NaN written over a checked file is
still refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import ModelSourceError
from lorastudio.lora import file_read
from lorastudio.lora.file_read import check_lora_values


def _lora(path: Path, value: float) -> Path:
    down = torch.full((4, 8), 0.1)  # [r, in]
    up = torch.full((8, 4), value)  # [out, r]
    save_file({"unet.a.lora_A.weight": down, "unet.a.lora_B.weight": up}, str(path))
    return path


def test_an_unchanged_file_is_read_once_and_a_rewritten_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _lora(tmp_path / "a.safetensors", 0.5)
    reads: list[str] = []
    real = file_read.check_finite
    monkeypatch.setattr(file_read, "check_finite", lambda p, n, t: (reads.append(n), real(p, n, t)))
    check_lora_values(path)
    assert len(reads) == 2
    check_lora_values(path)
    assert len(reads) == 2  # not read again
    stat = path.stat()
    _lora(path, float("nan"))  # the same size, in place
    os.utime(
        path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000)
    )  # a later write moves the modification time
    assert path.stat().st_size == stat.st_size
    with pytest.raises(ModelSourceError, match="NaN or infinite"):
        check_lora_values(path)
    with pytest.raises(ModelSourceError, match="NaN or infinite"):  # a refused file is never remembered
        check_lora_values(path)
