"""Issue 29 part 5 on the tiny FLUX.1: with `no_upscale` a 64 px image of a 128 px run is
encoded and trained at 64x64 (the crops the run really feeds the VAE, recorded by a wrapper
around the real data.load_crop); without it, at 128x128."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import lorastudio.data
from lorastudio.config import TrainConfig
from lorastudio.training.loop import train


@pytest.fixture
def mixed_sizes(tmp_path: Path) -> Path:
    folder = tmp_path / "sizes"
    folder.mkdir()
    Image.new("RGB", (64, 64), "red").save(folder / "small.png")
    Image.new("RGB", (160, 160), "blue").save(folder / "large.png")
    return folder


def _crop_sizes(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, ...]]:
    """Record the pixel shape of every crop the run encodes, by file name."""
    real = lorastudio.data.load_crop
    seen: dict[str, tuple[int, ...]] = {}

    def recording(item: Any, **kwargs: Any) -> Any:
        crop = real(item, **kwargs)
        seen[item.path.name] = tuple(crop.pixels.shape)  # [3, H, W]
        return crop

    monkeypatch.setattr(lorastudio.data, "load_crop", recording)
    return seen


@pytest.mark.parametrize(("no_upscale", "small_side"), [(True, 64), (False, 128)])
def test_a_small_image_trains_at_its_own_size_with_no_upscale(
    monkeypatch: pytest.MonkeyPatch,
    tiny_model: Callable[[str], Path],
    mixed_sizes: Path,
    tmp_path: Path,
    no_upscale: bool,
    small_side: int,
) -> None:
    seen = _crop_sizes(monkeypatch)
    cfg = TrainConfig.model_validate(
        {
            "family": "flux",
            "base_model": str(tiny_model("flux")),
            "data_dir": str(mixed_sizes),
            "resolution": 128,
            "steps": 1,
            "batch_size": 1,
            "lora_rank": 4,
            "trigger_word": "sks",
            "max_sequence_length": 16,
            "output_name": f"nu-{no_upscale}",
            "no_upscale": no_upscale,
            "seed": 0,
        }
    )
    result = train(cfg, [].append, device="cpu")
    assert result.lora_path is not None and result.lora_path.is_file()
    assert seen == {"small.png": (3, small_side, small_side), "large.png": (3, 128, 128)}
