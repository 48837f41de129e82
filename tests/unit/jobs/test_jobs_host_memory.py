"""The preflight's host RAM forecast (jobs/host_memory.py) and the refusal of a run that will not
fit before any model loads (issue 31 item 5)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import jobs_fake_workers as fakes
import pytest

from lorastudio.errors import HostMemoryShort
from lorastudio.jobs import hardware, host_memory, vram_estimate
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import plan_for_estimate
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.training.inputs.latents import cache_bytes

CPU = HostInfo("cpu", "cpu", None, precisions_for("cpu"))


def _cfg(model: Path, **over: object) -> dict:
    return {
        "family": "flux",
        "base_model": str(model),
        "data_dir": "shapes",
        "resolution": 256,
        "steps": 2,
        **over,
    }


@pytest.fixture
def model(tiny_model: Callable[[str], Path], shapes: Path) -> Path:
    return tiny_model("flux")


def _forecast(settings: Settings, raw: dict, host: HostInfo = CPU) -> dict:
    run = validate_run(raw, settings, live_output_names=set())
    cfg = run.config
    return host_memory.host_memory_forecast(
        cfg, run.model_dir, plan_for_estimate(cfg, host), host, run.scan.bucket_histogram()
    )


def test_the_vae_term_grows_with_the_pixels_and_the_cache_matches_the_engines(
    settings: Settings, model: Path
) -> None:
    small = _forecast(settings, _cfg(model, resolution=1024, latent_cache_max_gb=0))
    large = _forecast(settings, _cfg(model, resolution=4096, latent_cache_max_gb=0))
    # the reported case: forecast at 1.0 GB, killed at 3 GB; the VAE's full-resolution work is 16x
    assert large["host_gb"] > 3.0 > small["host_gb"]
    vae_growth = large["phases"]["latents"] - small["phases"]["latents"]
    assert vae_growth == pytest.approx(
        host_memory.VAE_ACT_PER_CHANNEL_PIXEL * 16 * (4096**2 - 1024**2) * 4 / 1e9, rel=0.05
    )  # 16: the tiny FLUX.1 VAE's block_out_channels[0]
    run = validate_run(_cfg(model, resolution=1024), settings, live_output_names=set())
    engine = cache_bytes([it.bucket for it in run.scan.items], 1, 16, 8) / 1e9
    held = _forecast(settings, _cfg(model, resolution=1024, latent_cache_max_gb=100))
    none = _forecast(settings, _cfg(model, resolution=1024, latent_cache_max_gb=0))
    assert held["phases"]["denoiser"] - none["phases"]["denoiser"] == pytest.approx(engine, abs=0.001)


def test_a_data_parallel_run_forecasts_every_rank(settings: Settings, model: Path) -> None:
    run = validate_run(_cfg(model, resolution=1024), settings, live_output_names=set())
    plan, buckets = plan_for_estimate(run.config, CPU), run.scan.bucket_histogram()
    one = host_memory.host_memory_forecast(run.config, run.model_dir, plan, CPU, buckets)
    four = host_memory.host_memory_forecast(
        run.config.model_copy(update={"num_gpus": 4}), run.model_dir, plan, CPU, buckets
    )
    assert four["host_gb"] == pytest.approx(4 * one["host_gb"], abs=0.02) and four["phases"] == one["phases"]


def test_a_run_that_will_not_fit_is_refused_before_anything_is_queued(
    settings: Settings, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hardware, "host_info", lambda: CPU)
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 1_000_000_000)
    service = JobService(
        settings, RunStore.open(settings.db_path), GpuArbiter(), worker_target=fakes.hang_ignoring_stop
    ).start()
    try:
        with pytest.raises(HostMemoryShort) as err:
            service.submit(_cfg(model, resolution=2048, output_name="big"))
        message = str(err.value)
        assert "1.00 GB is available" in message and "resolution (now 2048)" in message
        assert f"{err.value.forecast_gb:.2f} GB of host RAM" in message and err.value.forecast_gb > 1.0
        assert service.store.list_runs() == [] and service.status()["queue"] == []
        report = service.preflight(
            _cfg(model, resolution=2048, output_name="big")
        )  # says so, refuses nothing
        assert (
            report["memory"]["available_gb"] == 1.0
            and "1.00 GB is available" in report["memory"]["host_warning"]
        )
        assert service.submit(_cfg(model, resolution=32, output_name="small"))["status"] in {
            "queued",
            "preparing",
        }
    finally:
        service.shutdown()


def test_a_cpu_forecast_led_by_the_rough_activation_formula_only_warns(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A denoiser with neither a token width nor a U-Net's channels in its config gets its CPU
    activations from the accelerator formula (+-50 %): where they lead, the forecast only warns."""
    unet = _cfg(tiny_model("sdxl"), family="sdxl")
    assert _forecast(settings, unet)["certain"] is True  # the VAE and the base lead: measured
    monkeypatch.setattr(host_memory, "_unet_first_channels", lambda folder: None)  # an unknown layout
    monkeypatch.setitem(
        vram_estimate._ACT_GB_PER_BPARAM_BY_CLASS, "UNet2DConditionModel", (1e5, 1e5)
    )  # activations now lead the peak
    forecast = _forecast(settings, unet)
    assert max(forecast["phases"], key=forecast["phases"].get) == "denoiser" and forecast["certain"] is False


def test_an_uncertain_forecast_warns_instead(settings: Settings, model: Path) -> None:
    gpu = HostInfo("cuda", "H200", 139.0, precisions_for("cuda", (9, 0)), gpu_count=1)
    forecast = _forecast(settings, _cfg(model, resolution=2048), gpu)
    assert forecast["certain"] is False
    run = validate_run(_cfg(model), settings, live_output_names=set())
    warning = host_memory.check_host_memory(forecast, run.config, 1000)
    assert warning is not None and warning.startswith("may not fit")


def test_available_memory_reads_this_host() -> None:
    available = host_memory.available_host_bytes()
    assert available is not None and 0 < available < 2**50


@pytest.mark.slow
def test_the_forecast_is_within_15_percent_of_measured_cpu_runs(tmp_path: Path, sample_dataset: Path) -> None:
    """Real CPU runs of the tiny FLUX.1 and SDXL in child processes (bench/host_memory.py): peak
    RSS vs the forecast."""
    sys.path.insert(0, str(Path(__file__).parents[3]))
    from bench.host_memory import measure

    from lorastudio.tiny import save_tiny_model

    data = tmp_path / "two"
    data.mkdir()
    for src in sorted(sample_dataset.iterdir())[:4]:  # shape_00/01 .png + .txt
        (data / src.name).write_bytes(src.read_bytes())
    for family in ("flux", "sdxl"):
        folder = save_tiny_model(family, tmp_path / family)
        for resolution in (256, 1024):
            point = measure(family, folder, data, resolution, tmp_path / "home")
            assert abs(point["error_pct"]) <= 15, point


def test_the_cpu_denoiser_phase_follows_the_tokens(settings: Settings, model: Path) -> None:
    """A tiny FLUX.1 at 4096 px held ~1.1 GB of activations (65,536 tokens) on CPU against ~0.03 GB
    forecast by the accelerator formula (activations per billion parameters): the CPU term now
    follows the tokens, 16x from 1024 to 4096 px."""
    small = _forecast(settings, _cfg(model, resolution=1024, latent_cache="disk"))["phases"]["denoiser"]
    large = _forecast(settings, _cfg(model, resolution=4096, latent_cache="disk"))["phases"]["denoiser"]
    tokens = (4096 // 16) ** 2 - (1024 // 16) ** 2  # FLUX.1: 8 px per latent cell, 2x2 cells per token
    width = 2 * 16 * 3  # the tiny transformer: 2 heads of 16, 1 + 2 blocks
    per_token = 4 * (host_memory.CPU_ACT_PER_TOKEN + host_memory.CPU_ACT_PER_TOKEN_WIDTH * width)  # fp32
    assert large - small == pytest.approx(tokens * per_token / 1e9, abs=0.002)
    assert 0.9 < large < 1.5  # measured ~1.1 GB at 4096 px
    checkpointed = _forecast(
        settings, _cfg(model, resolution=4096, latent_cache="disk", gradient_checkpointing="full")
    )
    assert checkpointed["phases"]["denoiser"] < large / 5  # ACTIVATION_FACTOR["full"] = 0.1
    assert checkpointed["certain"] is True  # the VAE leads: measured


@pytest.mark.slow
def test_the_cpu_denoiser_phase_is_within_its_tolerance_of_a_measured_run(
    tmp_path: Path, sample_dataset: Path
) -> None:
    """The denoiser phase's peak RSS of a tiny FLUX.1 step at 2048 px on CPU (bench/host_memory.py
    resets the peak when the phase starts, so the VAE's larger peak does not hide it) against the
    forecast's base process + denoiser phase, within the -10 / +20 % jobs/host_memory.py states
    (one configuration's peak varies by up to 15 % between runs). Before: 0.48 GB forecast against
    0.65-0.77 GB measured (-27 to -38 %)."""
    sys.path.insert(0, str(Path(__file__).parents[3]))
    from bench.host_memory import measure_denoiser_phase

    from lorastudio.tiny import save_tiny_model

    data = tmp_path / "one"
    data.mkdir()
    for src in sorted(sample_dataset.iterdir())[:2]:  # shape_00 .png + .txt
        (data / src.name).write_bytes(src.read_bytes())
    point = measure_denoiser_phase(
        "flux", save_tiny_model("flux", tmp_path / "flux"), data, 2048, tmp_path / "home"
    )
    assert point["tokens"] == 16_384 and -10 <= point["error_pct"] <= 20, point


def test_the_disk_cache_keeps_the_latents_out_of_ram(settings: Settings, model: Path) -> None:
    memory = _forecast(settings, _cfg(model, resolution=1024, latent_cache="memory"))
    disk = _forecast(settings, _cfg(model, resolution=1024, latent_cache="disk"))
    over = _forecast(settings, _cfg(model, resolution=1024, latent_cache_max_gb=0))  # auto: disk
    run = validate_run(_cfg(model, resolution=1024), settings, live_output_names=set())
    engine = cache_bytes([it.bucket for it in run.scan.items], 1, 16, 8) / 1e9
    assert memory["phases"]["denoiser"] - disk["phases"]["denoiser"] == pytest.approx(engine, abs=0.001)
    assert disk["phases"] == over["phases"] and disk["phases"]["latents"] == over["phases"]["latents"]
