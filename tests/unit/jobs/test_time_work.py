"""The wall-time forecast's cost model (jobs/time_work.py): a step's and the VAE encoder's work
from the model's own safetensors headers and config, what a phase's time scales with instead of
its pixels (issue 31 item 5; RELIABILITY 880)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.jobs.time_rate import CPU_WORK_RATE, device_rate
from lorastudio.jobs.time_work import scaled, step_work, vae_work


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


def test_the_vae_counts_its_convolutions_output_beside_its_attention(
    tiny_model: Callable[[str], Path],
) -> None:
    """The tiny VAE's encode (16-32 channels, the mid attention over pixels / 64 cells) on one CPU
    thread, CPU time (bench/RESULTS note 42, `python -m bench.cpu_costs`): 1.134 s at 1024 px, 9.02 s
    at 2048 (7.95x), the attention 5.4 of the 9.0 s. Its FLOPs alone grow 11.7x (the attention's cells^2 is 88 % of
    them at 2048 px), which put the latent cache fitted on 256 and 1024 px ~2x high at 2048."""
    model = str(tiny_model("flux"))
    vae = {side: vae_work("flux", model, side * side) for side in (256, 1024, 2048)}
    assert vae[2048] / vae[1024] == pytest.approx(9.02 / 1.134, rel=0.15)
    # the latent cache of the matrix's flux runs (one thread, 4 images; RESULTS note 42, round 1):
    # 0.49 s at 256 px and 13.69 s at 1024 px fit through the origin forecast 2048 px's 102.3 s
    rate = 13.69 / vae[1024]
    assert rate * vae[2048] == pytest.approx(102.3, rel=0.15)


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


def test_another_base_is_scaled_by_its_work_from_the_records_nearest_its_size(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """The `machine` basis: a base with no record of its own (the tiny FLUX.1 less one single
    block) forecast from another base's records, those nearest its work first (before: the
    newest, three 2048 px runs scaled down by pixels x denoiser bytes)."""
    from safetensors.torch import load_file, save_file

    from lorastudio.config import TrainConfig
    from lorastudio.jobs.hardware import HostInfo, precisions_for
    from lorastudio.jobs.time_forecast import time_forecast
    from lorastudio.timings import PHASES, run_signature, write_record

    base = tiny_model("flux")
    other = tmp_path / "other"
    shutil.copytree(base, other)
    (weights,) = (other / "transformer").glob("*.safetensors")
    tensors = {
        k: v for k, v in load_file(weights).items() if not k.startswith("single_transformer_blocks.1.")
    }
    save_file(tensors, weights)
    plan = {
        "base_precision": "fp32",
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": 1,
    }
    cpu = HostInfo("cpu", "cpu", None, precisions_for("cpu"))

    def signature(model: Path, side: int) -> dict:
        return run_signature(
            family="flux", base_model=str(model), denoiser="transformer", device_name="cpu", plan=plan,
            compiled=False, attention_backend="auto", buckets={f"{side}x{side}": 1}, batch_size=1,
            grad_accum=1, lora_rank=16,
        )  # fmt: skip

    # two 256 px runs of 1 s a step, then three 2048 px runs of 50 s (the newest)
    for i, (side, step) in enumerate([(256, 1.0), (256, 1.0), (2048, 50.0), (2048, 50.0), (2048, 50.0)]):
        phases = dict.fromkeys(PHASES, 1.0) | {"steps": step * 10, "first_step": step}
        record = {"signature": signature(base, side), "phases": phases, "s_per_step": step, "steps": 11}
        write_record(tmp_path / "home", f"r{i}", record | {"texts": 1, "latents_encoded": 1})
    cfg = TrainConfig(
        family="flux", base_model=str(other), data_dir="d", steps=11, resolution=256, lora_rank=16
    )
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"256x256": 1}}
    forecast = time_forecast(cfg, other, cpu, plan, False, work, tmp_path / "home")
    steps = next(p for p in forecast["phases"] if p["name"] == "steps")
    assert forecast["source"] == "machine" and "work of each model's shapes" in steps["basis"]
    # the 256 px records' 1 s a step, less the one block's work (a few ms at 12 GFLOP/s)
    assert steps["seconds"] == pytest.approx(10.0, rel=0.05)


def test_another_bases_weights_load_scales_only_its_bytes_part(
    tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    """The `machine` basis's weights load: a tiny SDXL run forecast from a tiny FLUX.1 record's 3.7 s
    load (bench/RESULTS note 42, sdxl-256: 3.76 s measured). A tiny pipeline's load is its
    components built and files opened, not its bytes (~2 MB: a millisecond at the e2e run's read
    rate); before, the whole load was scaled by the two denoisers' bytes (8.7x: 32.4 s)."""
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.hardware import HostInfo, precisions_for
    from lorastudio.jobs.time_forecast import time_forecast
    from lorastudio.timings import PHASES, run_signature, write_record

    flux, sdxl = tiny_model("flux"), tiny_model("sdxl")
    plan = {
        "base_precision": "fp32",
        "gradient_checkpointing": "off",
        "offload_blocks": 0,
        "micro_batch_size": 1,
    }
    signature = run_signature(
        family="flux", base_model=str(flux), denoiser="transformer", device_name="cpu", plan=plan,
        compiled=False, attention_backend="auto", buckets={"256x256": 1}, batch_size=1,
        grad_accum=1, lora_rank=16,
    )  # fmt: skip
    phases = dict.fromkeys(PHASES, 1.0) | {"weights_load": 3.7}
    record = {"signature": signature, "phases": phases, "s_per_step": 0.1, "steps": 11}
    write_record(tmp_path / "home", "r0", record | {"texts": 1, "latents_encoded": 1})
    cfg = TrainConfig(
        family="sdxl", base_model=str(sdxl), data_dir="d", steps=11, resolution=256, lora_rank=16
    )
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"256x256": 1}}
    cpu = HostInfo("cpu", "cpu", None, precisions_for("cpu"))
    forecast = time_forecast(cfg, sdxl, cpu, plan, False, work, tmp_path / "home")
    load = next(p for p in forecast["phases"] if p["name"] == "weights_load")
    assert forecast["source"] == "machine"
    assert load["seconds"] == pytest.approx(3.7, rel=0.05)
