"""A LoRA file gets the permissions of the run's other outputs (the umask's), not the 0600 of
safetensors' own writer (issue 30), and is durable as a checkpoint is: fsynced before its rename,
its folder after."""

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


def test_a_lora_file_is_fsynced_before_its_rename_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final LoRA (and every snapshot) is staged and renamed into place: without an fsync of
    the file a power loss can leave the name on an empty or partial file, without one of the
    folder the rename itself may be lost."""
    steps: list[tuple[str, object]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        steps.append(("fsync", (info.st_dev, info.st_ino)))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        steps.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = write_lora_file(tmp_path / "a.safetensors", {"x.lora_A.weight": torch.ones(2, 4)}, {})
    file_id = (path.stat().st_dev, path.stat().st_ino)  # the staged file's inode, renamed
    folder_id = (tmp_path.stat().st_dev, tmp_path.stat().st_ino)
    assert steps == [("fsync", file_id), ("replace", "a.safetensors"), ("fsync", folder_id)]
