"""The cost model (jobs/time_work.py, RELIABILITY 880) on a base whose safetensors header is
damaged or hostile: no work (the pixel rule), never an exception out of the preflight's forecast
or the VRAM estimate (RELIABILITY 910)."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.jobs.time_work import step_work, vae_work
from lorastudio.jobs.vram_estimate import lora_param_count

BAD_SHAPES = {
    "a string size": ["a", 4],
    "a size past float's range": [10**200, 10**200],
    "a nested list": [[1], [2]],
    "an integer": 5,
    "null": None,
    "a negative size": [-4, 4],
    "a fractional size": [1.5, 4],
    "a string": "3072",
}


def _damage(file: Path, shape: object) -> None:
    """Rewrite the header of `file` with its first tensor's shape replaced by `shape`."""
    data = file.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    first = next(k for k in header if k != "__metadata__")
    header[first]["shape"] = shape
    raw = json.dumps(header).encode()
    file.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + size :])


@pytest.mark.parametrize("family", ["flux", "sdxl"])
def test_a_base_with_a_damaged_header_has_no_work_and_no_crash(
    family: str, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    base = tiny_model(family)
    assert step_work(family, str(base), 256 * 256, 1) and vae_work(family, str(base), 256 * 256)
    denoiser = "transformer" if family == "flux" else "unet"
    for i, (label, shape) in enumerate(BAD_SHAPES.items()):
        copy = tmp_path / f"{family}-{i}"
        shutil.copytree(base, copy)
        for part in (denoiser, "vae"):
            _damage(sorted((copy / part).glob("*.safetensors"))[0], shape)
        # the old code: ValueError / TypeError / OverflowError out of the forecast
        assert step_work(family, str(copy), 256 * 256, 1) is None, label
        assert vae_work(family, str(copy), 256 * 256) is None, label
        # the VRAM estimate's LoRA size reads the same headers (a string size concatenated)
        assert lora_param_count(copy / denoiser, ("to_q",), 4) == 0, label


def test_a_u_net_header_of_absurd_levels_is_counted_without_a_hang(tmp_path: Path) -> None:
    """A level is a number from the names (`down_blocks.<i>.`): 10^8 raised OverflowError after
    computing 4 ** 10^8 as an integer (0.75 s), 10^12 did not end (4 ** 10^12 is 250 GB)."""
    for i, index in enumerate((10**8, 10**12, int("9" * 400))):
        base = tmp_path / str(i)
        header = {
            f"down_blocks.{index}.resnets.0.conv1.weight": {"dtype": "F32", "shape": [4, 4, 3, 3], "data_offsets": [0, 576]},
            "down_blocks.0.resnets.0.conv1.weight": {"dtype": "F32", "shape": [4, 4, 3, 3], "data_offsets": [576, 1152]},
            "up_blocks.0.resnets.0.conv1.weight": {"dtype": "F32", "shape": [4, 4, 3, 3], "data_offsets": [1152, 1728]},
        }  # fmt: skip
        raw = json.dumps(header).encode()
        (base / "unet").mkdir(parents=True)
        (base / "unet" / "m.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(1728))
        work = step_work("sdxl", str(base), 1024 * 1024, 1)
        # down_blocks.0's convolution at the latent's 16,384 cells (the others at no cell left)
        assert work == pytest.approx(2 * 4 * 4 * 3 * 3 * 16384, rel=1e-6), index
