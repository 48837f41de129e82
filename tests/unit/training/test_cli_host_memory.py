"""`lorastudio train` refuses a run whose host RAM forecast exceeds the available memory before
any model loads, and `--check` prints the forecast (issue 31 item 5)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.jobs import hardware, host_memory
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.host_memory import CUDA_PROCESS_GB
from lorastudio.settings import get_settings


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    if not app.registered_commands:
        _register()


def test_train_refuses_a_run_that_will_not_fit_before_loading(
    tiny_model, small_dataset, tmp_path, run_settings, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(hardware, "host_info", lambda: HostInfo("cpu", "cpu", None, precisions_for("cpu")))
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 1_000_000_000)
    raw = run_settings("flux", tiny_model("flux"), small_dataset, {"resolution": 2048, "output_name": "big"})
    config = tmp_path / "run.json"
    config.write_text(json.dumps(raw))
    checked = CliRunner().invoke(app, ["train", str(config), "--check", "--device", "cpu"])
    # the report, then the refusal the run would meet: exit 2 (before: 0, "the run would start")
    assert checked.exit_code == 2, checked.output
    assert "host RAM: ~" in checked.output and "1.0 GB available" in checked.output
    assert "1.00 GB is available" in checked.output and "schedule:" in checked.output
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 100_000_000_000)
    fits = CliRunner().invoke(app, ["train", str(config), "--check", "--device", "cpu"])
    assert fits.exit_code == 0, fits.output
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 1_000_000_000)
    result = CliRunner().invoke(app, ["train", str(config), "--device", "cpu"])
    assert result.exit_code == 2, result.output  # cli.app.main: a domain error exits 2 with its message
    assert "GB of host RAM" in result.output and "1.00 GB is available" in result.output
    assert "resolution (now 2048)" in result.output
    assert not (get_settings().outputs_dir / "big").exists()  # nothing loaded, nothing written


def test_a_cpu_run_on_a_gpu_host_is_forecast_for_the_cpu(
    tiny_model, small_dataset, tmp_path, run_settings, monkeypatch: pytest.MonkeyPatch
):
    """`--device cpu` on a GPU host keeps the weights and activations in host RAM: the forecast
    and the refusal are the CPU's (before: the GPU's, CUDA_PROCESS_GB + the cache, a warning)."""
    gpu = HostInfo("cuda", "H100", 79.0, precisions_for("cuda", (9, 0)), gpu_count=1, gpu_memory_gb=(79.0,))
    monkeypatch.setattr(hardware, "host_info", lambda: gpu)
    monkeypatch.setattr(host_memory, "available_host_bytes", lambda: 1_500_000_000)
    raw = run_settings("flux", tiny_model("flux"), small_dataset, {"resolution": 2048, "output_name": "big"})
    config = tmp_path / "run.json"
    config.write_text(json.dumps(raw))
    checked = CliRunner().invoke(app, ["train", str(config), "--check", "--device", "cpu"])
    assert checked.exit_code == 2, checked.output  # the report, then the run's refusal
    gb = float(checked.output.split("host RAM: ~", 1)[1].split(" GB", 1)[0])
    # the CPU's: the VAE's full-resolution work (measured 1.8 GB), not CUDA_PROCESS_GB's 3.9 GB + the cache
    assert 1.5 < gb < CUDA_PROCESS_GB and "1.5 GB available" in checked.output, checked.output
    result = CliRunner().invoke(app, ["train", str(config), "--device", "cpu"])
    assert result.exit_code == 2, result.output  # refused before loading, not warned and trained
    assert f"{gb:.2f} GB of host RAM" in result.output and "1.50 GB is available" in result.output
    assert not (get_settings().outputs_dir / "big").exists()
