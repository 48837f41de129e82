"""Edit training end to end through the CLI: `lorastudio tiny dataset --paired`, `lorastudio
train` of flux-kontext on it, and `lorastudio generate --control`: the LoRA changes the edit of a
reference image; a missing reference is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.settings import get_settings


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_train_kontext_on_the_paired_tiny_dataset_and_edit_with_a_reference(
    tiny_model, tmp_path, run_settings
):
    made = _invoke("tiny", "dataset", "--paired")
    assert made.exit_code == 0, made.output
    data = get_settings().datasets_dir / "tiny-shapes-paired"
    assert len(list((data / "control").glob("*.png"))) == len(list(data.glob("*.png"))) == 8
    config = tmp_path / "edit.json"
    overrides = {
        "steps": 4,
        "learning_rate": 5e-2,
        "output_name": "edit",
        "data_dir": "tiny-shapes-paired",
        "random_flip": True,
    }
    config.write_text(json.dumps(run_settings("flux-kontext", tiny_model("flux-kontext"), data, overrides)))
    trained = _invoke("train", str(config), "--device", "cpu")
    assert trained.exit_code == 0, trained.output
    lora = get_settings().outputs_dir / "edit" / "edit.safetensors"
    reference = str(data / "control" / "shape_00.png")
    common = [
        "--base",
        str(tiny_model("flux-kontext")),
        "--prompt",
        "invert the colours",
        "--control",
        reference,
    ]
    common += ["--width", "32", "--height", "32", "--steps", "2", "--device", "cpu"]
    images = {}
    for name, extra in (("base", []), ("lora", ["--lora", f"{lora}:1.0"])):
        out = tmp_path / f"{name}.png"
        result = _invoke("generate", *common, "--out", str(out), *extra)
        assert result.exit_code == 0, result.output
        images[name] = np.asarray(Image.open(out), dtype=np.float32)
    assert images["base"].shape == (32, 32, 3)
    assert np.abs(images["lora"] - images["base"]).mean() > 0.5  # out of 255: the LoRA changes the edit
    other = _invoke(
        "generate", *common[:-8], "--control", str(tmp_path / "nope.png"), "--out", str(tmp_path / "x.png")
    )
    assert other.exit_code != 0 and "nope.png not found" in other.output


def test_the_kontext_demo_trains_on_the_paired_sample_and_edits_its_reference():
    result = _invoke("demo", "--family", "flux-kontext", "--steps", "2")
    assert result.exit_code == 0, result.output
    assert "demo done: flux-kontext, 2 steps" in result.output
    assert str(get_settings().datasets_dir / "sample-paired") in result.output
    assert (get_settings().datasets_dir / "sample-paired" / "control" / "shape_00.png").is_file()
