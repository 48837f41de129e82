"""The wall-time forecast's cost model (jobs/time_work.py): a step's and the VAE encoder's work
from the model's own safetensors headers and config, what a phase's time scales with instead of
its pixels (issue 31 item 5; RELIABILITY 880)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.jobs.time_work import CPU_WORK_RATE, device_rate, scaled, step_work, vae_work


def test_the_tiny_flux_step_follows_its_text_tokens_then_its_attention(
    tiny_model: Callable[[str], Path],
) -> None:
    model = str(tiny_model("flux"))
    work = {side: step_work("flux", model, side * side, 1) for side in (64, 256, 1024, 2048)}
    assert all(w and w > 0 for w in work.values()), work
    # 64 px: 16 image tokens beside T5's 512 text tokens, so 256 px (16x the pixels) is < 2.5x the
    # work; measured on the 2-core host, one thread: 16 / 36 ms a step (2.3x)
    assert work[256] / work[64] < 2.5
    # 2048 px: attention over 16,896 tokens; 13x the work of 1024 px (4x the pixels), the tiny
    # model's step measured 12.1x on one thread (bench/RESULTS note 36, third addition)
    assert work[2048] / work[1024] > 10
    assert step_work("flux", model, 256 * 256, 4) == pytest.approx(4 * work[256])


def test_a_u_net_and_the_vae_count_their_levels_and_attention(tiny_model: Callable[[str], Path]) -> None:
    model = str(tiny_model("sdxl"))
    unet = {side: step_work("sdxl", model, side * side, 1) for side in (256, 1024, 2048)}
    # convolutions scale with the cells of their level (4x from 1024 to 2048), attention more
    assert 4 < unet[2048] / unet[1024] < 16
    vae = {side: vae_work("sdxl", model, side * side) for side in (256, 1024, 2048)}
    # the convolutions grow with the pixels (16x from 256 to 1024 px, 4x to 2048), the mid
    # attention over pixels / 64 cells with their square: more than the pixels, less than squared
    assert 16 < vae[1024] / vae[256] < 256
    assert 4 < vae[2048] / vae[1024] < 16
    # the tiny SDXL's step on one thread (bench/RESULTS note 36, third addition): 0.90 s at 1024 px,
    # 10.94 s at 2048 (12.2x): the cost model's 12.8x; a line in pixels from 256 and 1024 px: 3.6 s
    assert unet[2048] / unet[1024] == pytest.approx(10.94 / 0.90, rel=0.15)


def test_no_headers_no_work_and_the_split_keeps_the_fixed_part(tmp_path: Path) -> None:
    assert step_work("flux", str(tmp_path), 65536, 1) is None  # a hub id: the callers scale by pixels
    assert vae_work("flux", str(tmp_path), 65536) is None
    # 1 s at 1e10 of work and 1e10 per second: all of it work, doubled with the work
    assert scaled(1.0, 1e10, 2e10, 1e10) == pytest.approx(2.0)
    # 1 s of which 0.25 s is work: 0.75 s fixed + 0.25 x 4
    assert scaled(1.0, 2.5e9, 1e10, 1e10) == pytest.approx(1.75)
    assert scaled(1.0, 1e10, 2e10, None) == pytest.approx(2.0)  # no rate: in proportion to the work
    # no record of two sizes on a CPU: its default rate; on a GPU: none (all of a phase scales)
    assert device_rate([], "cpu", ("family",))[0] == CPU_WORK_RATE
    assert device_rate([], "NVIDIA H100", ("family",))[0] is None
