"""Edit training end to end through the CLI: `lorastudio tiny dataset --paired`, `lorastudio
train` of flux-kontext / qwen-image-edit on it, and `lorastudio generate --control`: the LoRA
changes the edit of a reference image; a missing reference, or more than the checkpoint takes, is
refused; the demo of each edit family trains and changes its edit."""

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
        "control_resolution": "target",  # tiny controls (the pipeline rule: test_control_resolution.py)
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


# qwen-image-edit's demo is slow (~6 CPU s: its tiny pipeline built in the home and two renders):
# the demo's edit-family path (the paired sample, the first control as the reference) is
# flux-kontext's case, and Qwen-Image-Edit trained on the paired dataset and rendering with a
# reference through the CLI is test_train_qwen_edit_in_kohya_layout_and_edit_with_a_reference's
@pytest.mark.parametrize("family", ["flux-kontext", pytest.param("qwen-image-edit", marks=pytest.mark.slow)])
def test_the_edit_demo_trains_on_the_paired_sample_and_edits_its_reference(family):
    result = _invoke("demo", "--family", family, "--steps", "2")
    assert result.exit_code == 0, result.output
    assert f"demo done: {family}, 2 steps" in result.output
    assert str(get_settings().datasets_dir / "sample-paired") in result.output
    assert (get_settings().datasets_dir / "sample-paired" / "control" / "shape_00.png").is_file()
    change = float(result.output.split("mean pixel change with the LoRA: ")[1].split(" /")[0])
    assert change > 0  # the LoRA changes the edit


def test_train_qwen_edit_in_kohya_layout_and_edit_with_a_reference(tiny_model, tmp_path, run_settings):
    """The kohya / ComfyUI file passes the save-time checks of both loaders, loads in diffusers'
    QwenImageEditPipeline and changes its edit; two references are refused (it takes one)."""
    assert _invoke("tiny", "dataset", "--paired").exit_code == 0
    data = get_settings().datasets_dir / "tiny-shapes-paired"
    base = str(tiny_model("qwen-image-edit"))
    overrides = {"steps": 6, "learning_rate": 5e-2, "output_name": "qedit", "lora_format": "kohya"}
    config = tmp_path / "qedit.json"
    config.write_text(json.dumps(run_settings("qwen-image-edit", base, data, overrides)))
    trained = _invoke("train", str(config), "--device", "cpu")
    assert trained.exit_code == 0, trained.output
    lora = get_settings().outputs_dir / "qedit" / "qedit.safetensors"
    loaders = json.loads(lora.with_suffix(".json").read_text())["loaders"]
    assert loaders["comfyui"]["ok"] and loaders["diffusers"]["ok"], loaders
    reference = str(data / "control" / "shape_00.png")
    common = ["--base", base, "--prompt", "invert the colours", "--control", reference]
    common += ["--width", "32", "--height", "32", "--steps", "2", "--device", "cpu"]
    images = {}
    for name, extra in (("base", []), ("lora", ["--lora", f"{lora}:1.0"])):
        out = tmp_path / f"{name}.png"
        result = _invoke("generate", *common, "--out", str(out), *extra)
        assert result.exit_code == 0, result.output
        images[name] = np.asarray(Image.open(out), dtype=np.float32)
    assert np.abs(images["lora"] - images["base"]).mean() > 0.5  # out of 255: the LoRA changes the edit
    two = _invoke("generate", *common, "--control", reference, "--out", str(tmp_path / "x.png"))
    assert two.exit_code != 0 and "Qwen-Image-Edit takes at most 1 reference images, got 2" in two.output
    # a run's control_resolution (RELIABILITY 1490): the reference encoded at its size, recorded
    sized = _invoke("generate", *common, "--control-resolution", "64", "--out", str(tmp_path / "s.png"))
    assert sized.exit_code == 0, sized.output
    with Image.open(tmp_path / "s.png") as image:
        assert json.loads(image.text["lorastudio"])["control_resolution"] == 64
    small = _invoke("generate", *common, "--control-resolution", "32", "--out", str(tmp_path / "t.png"))
    assert (
        small.exit_code == 2
        and "32: must be 'pipeline', 'target' or a side of 64-4096 pixels" in small.output
    )
