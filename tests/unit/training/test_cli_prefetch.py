"""`lorastudio train` warms its base model's weight files from its start (jobs/prefetch.py): the
prefetch of a real run on the tiny FLUX.1 pipeline covers the run's files in load order, follows
the run's loads, and has ended when the command returns; LORASTUDIO_PREFETCH_WEIGHTS=0 turns it off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.jobs import prefetch as prefetch_module
from lorastudio.settings import get_settings


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    started: list[Any] = []
    real = prefetch_module.start_prefetch

    def start(data: Any, settings: Any) -> Any:
        started.append(real(data, settings))
        return started[-1]

    monkeypatch.setattr(prefetch_module, "start_prefetch", start)
    return started


def test_a_cli_run_prefetches_its_weight_files_and_stops_with_it(
    tiny_model,
    small_dataset,
    tmp_path: Path,
    run_settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = _spy(monkeypatch)
    model = tiny_model("flux")
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", model, small_dataset, {"steps": 1})))
    with (
        caplog.at_level("INFO", logger="lorastudio.prefetch"),
        caplog.at_level("INFO", logger="lorastudio.training.planning.plan_build"),
    ):
        result = CliRunner().invoke(app, ["train", str(config), "--set", "output_name=pf", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    # the denoiser's build stages, timed in one line (the load phase's split, RESULTS note 34)
    build = [r.getMessage() for r in caplog.records if r.getMessage().startswith("denoiser build: ")]
    assert len(build) == 1, build
    stages = [part.split(" ")[0] for part in build[0].removeprefix("denoiser build: ").split(", ")]
    assert stages == ["load", "precision", "fuse", "lora", "swap+compile", "checkpointing"], build
    assert len(started) == 1 and started[0] is not None
    prefetch = started[0]
    assert not prefetch.running and prefetch._stop.is_set()  # ended with the run
    assert prefetch._passed == 2  # it saw the run load its denoiser
    expected = [
        model / "text_encoder" / "model.safetensors",
        model / "text_encoder_2" / "model.safetensors",
        model / "vae" / "diffusion_pytorch_model.safetensors",
        model / "transformer" / "diffusion_pytorch_model.safetensors",
    ]
    report = prefetch.report
    seen = sorted([*report.read, *(p for p, _ in report.skipped)], key=expected.index)
    assert seen == expected  # each read, or skipped because the run's loader got there first
    assert report.read and all(why.startswith("the run already loads past") for _, why in report.skipped)
    assert report.bytes_read >= sum(p.stat().st_size for p in report.read)
    assert f"weight prefetch: {len(report.read)} file(s)" in caplog.text  # the run's log says so

    monkeypatch.setenv("LORASTUDIO_PREFETCH_WEIGHTS", "0")
    get_settings.cache_clear()
    started.clear()
    result = CliRunner().invoke(app, ["train", str(config), "--set", "output_name=pf-off", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert started == [None]  # asked, and turned off by the setting
