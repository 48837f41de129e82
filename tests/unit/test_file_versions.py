"""Every per-file memo keys on file_version.version_of (RELIABILITY 181): a file rewritten in place
to the same size with its mtime put back (`cp -p` over it, `rsync --inplace -t`, os.utime) is
another version. Before, the decoded-image record, the dataset detail's header memo, the
thumbnail cache, the base-model digest memo and the checked-LoRA memo keyed on (inode, size,
mtime) and answered for the old bytes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import save_file
from tests.file_rewrites import rewrite_keeping_mtime

from lorastudio.data import dataset_detail, disk_cache, thumbnails
from lorastudio.errors import ModelSourceError
from lorastudio.lora.file_read import check_lora_values


def _png(width: int, height: int, pad_to: int = 0) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(buf, format="PNG")
    data = buf.getvalue()
    return data + bytes(max(0, pad_to - len(data)))  # bytes after IEND: Pillow ignores them


def test_the_image_memos_see_an_in_place_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    path.write_bytes(_png(32, 16, pad_to=400))
    assert dataset_detail.stored_header(path)["width"] == 32  # type: ignore[index]
    key = thumbnails.cache_key(path, 64)
    digest = disk_cache._sampled_digest(path)
    rewrite_keeping_mtime(path, _png(16, 32, pad_to=400))
    assert dataset_detail.stored_header(path)["width"] == 16  # type: ignore[index]
    assert thumbnails.cache_key(path, 64) != key
    assert disk_cache._sampled_digest(path) != digest


def test_a_lora_rewritten_in_place_with_its_mtime_put_back_is_checked_again(tmp_path: Path) -> None:
    path = tmp_path / "a.safetensors"

    def lora(value: float) -> bytes:
        save_file({"unet.a.lora_A.weight": torch.full((4, 8), 0.1), "unet.a.lora_B.weight": torch.full((8, 4), value)}, str(path))  # fmt: skip
        return path.read_bytes()

    bad = lora(float("nan"))
    lora(0.5)
    check_lora_values(path)  # passed: remembered
    rewrite_keeping_mtime(path, bad)
    with pytest.raises(ModelSourceError, match="NaN or infinite"):
        check_lora_values(path)
