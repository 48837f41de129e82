"""`lorastudio generate --lora NAME` takes a run's name as the UI and API do; a LoRA of another
family is refused naming both families (issue 30)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.settings import get_settings


def _generate(base: Path, out: Path, *loras: str):
    if not app.registered_commands:
        _register()
    args = ["generate", "--base", str(base), "--prompt", "a red square", "--out", str(out), "--steps", "2"]
    args += ["--width", "32", "--height", "32", "--device", "cpu"]
    for lora in loras:
        args += ["--lora", lora]
    return CliRunner().invoke(app, args)


def _as_run(lora: Path, name: str) -> Path:
    run = get_settings().outputs_dir / name
    run.mkdir(parents=True)
    return Path(shutil.copy(lora, run / f"{name}.safetensors"))


def test_generate_takes_a_runs_name(
    flux_lora: Path, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    _as_run(flux_lora, "my-run")
    by_name = _generate(tiny_model("flux"), tmp_path / "a.png", "my-run:0.8")
    assert by_name.exit_code == 0, by_name.output
    assert Image.open(tmp_path / "a.png").size == (32, 32)
    by_path = _generate(tiny_model("flux"), tmp_path / "b.png", f"{flux_lora}:0.8")
    assert by_path.exit_code == 0, by_path.output
    missing = _generate(tiny_model("flux"), tmp_path / "c.png", "no-such-run")
    assert missing.exit_code == 2 and "no run named 'no-such-run'" in missing.output.replace("\n", "")


def test_a_lora_of_another_family_is_refused_naming_both(
    flux_lora: Path, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    _as_run(flux_lora, "flux-run")
    result = _generate(tiny_model("sdxl"), tmp_path / "x.png", "flux-run")
    out = result.output.replace("\n", "")
    assert result.exit_code == 2, result.output
    assert "not a sdxl LoRA" in out and "it is a flux one" in out
    assert "Target modules" not in out and not (tmp_path / "x.png").exists()
