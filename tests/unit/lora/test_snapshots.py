"""Intermediate LoRAs of real (tiny) runs: every checkpoint and every `save_lora_every` steps
write loras/<name>-step-N.safetensors in the run's layout with its sidecar; they load in plain
diffusers (the image changes from step to step) and pass the save-time ComfyUI check;
`keep_last` bounds the checkpoints and `keep_loras` the snapshots, separately."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.errors import ModelSourceError
from lorastudio.generate import generate_image, load_pipeline
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import convert_file, detect_layout
from lorastudio.lora.snapshots import list_lora_snapshots
from lorastudio.settings import Settings
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import checkpoint_step, list_checkpoints


def _extra(family: str) -> dict | None:
    supports = families.get(family).spec.supports
    return {"max_sequence_length": 16} if "max_sequence_length" in supports else None


def _size(family: str) -> int:
    return max(32, 2 * families.get(family).spec.resolution_multiple)


def _image(pipe, family: str) -> np.ndarray:
    size = _size(family)
    img = generate_image(
        pipe,
        family,
        prompt="sks, a red circle",
        seed=0,
        steps=2,
        width=size,
        height=size,
        extra=_extra(family),
    )
    return np.asarray(img, dtype=np.float32)


def _train(family: str, tiny_model, sample_dataset: Path, home: Path, **overrides):
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(sample_dataset),
        "resolution": _size(family),
        "steps": 6,
        "learning_rate": 5e-2,
        "lora_rank": 4,
        "lora_alpha": 8.0,
        "batch_size": 2,
        "output_name": "snap",
        "seed": 0,
        "trigger_word": "sks",
        "save_every": 2,
        "keep_last": 1,
        "save_lora_every": 3,
        **(_extra(family) or {}),
        **overrides,
    }
    return train(TrainConfig.model_validate(raw), [].append, settings=Settings(home=home), device="cpu")


@pytest.mark.parametrize("family", ["sdxl", "flux"])
def test_checkpoints_and_save_lora_every_write_loadable_snapshots(
    family, tiny_model, sample_dataset, tmp_path
):
    result = _train(family, tiny_model, sample_dataset, tmp_path)
    run_dir = result.lora_path.parent
    snapshots = list_lora_snapshots(run_dir)
    assert [s for s, _ in snapshots] == [2, 3, 4]  # checkpoints at 2, 4 (not 6: the final LoRA) + every 3
    assert [checkpoint_step(p) for p in list_checkpoints(run_dir)] == [4]  # keep_last=1, independently
    internal = list_checkpoints(run_dir)[0] / "lora.safetensors"  # resume state: points to the snapshot
    with pytest.raises(ModelSourceError, match=r"loras/<name>-step-N\.safetensors"):
        convert_file(internal, tmp_path / "x.safetensors", "kohya", family=family)
    layout = "kohya" if family == "sdxl" else "diffusers"
    images = []
    for step, path in snapshots:
        sidecar = json.loads(path.with_suffix(".json").read_text())
        assert sidecar["snapshot"] is True and sidecar["steps"] == step and sidecar["total_steps"] == 6
        assert sidecar["lora_format"] == layout and sidecar["lora_file"] == f"loras/{path.name}"
        assert sidecar["loaders"]["comfyui"]["ok"] and sidecar["loaders"]["diffusers"]["ok"]
        tensors, header = read_lora_file(path)
        assert detect_layout(tensors) == layout and header["lorastudio.steps"] == str(step)
        pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
        pipe.load_lora_weights(str(path))  # plain diffusers
        images.append(_image(pipe, family))
    base = _image(load_pipeline(str(tiny_model(family)), family, device="cpu"), family)
    for a, b in zip([base, *images], images, strict=False):
        assert np.abs(a - b).mean() > 0.1  # each snapshot differs from the previous one (and the base)

    from lorastudio.cli.app import _register, app

    _register()
    out = CliRunner().invoke(app, ["lora", "list", str(run_dir)])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["2", "3", "4", "6"]  # + the final LoRA
    assert str(result.lora_path) in lines[-1]


def test_keep_loras_bounds_the_snapshots_only(tiny_model, sample_dataset, tmp_path):
    result = _train(
        "z-image", tiny_model, sample_dataset, tmp_path, save_every=1, keep_last=2, save_lora_every=None,
        keep_loras=2,
    )  # fmt: skip
    run_dir = result.lora_path.parent
    assert [s for s, _ in list_lora_snapshots(run_dir)] == [4, 5]
    assert [checkpoint_step(p) for p in list_checkpoints(run_dir)] == [4, 5]
    assert sorted(p.name for p in (run_dir / "loras").iterdir()) == [
        "snap-step-000004.json", "snap-step-000004.safetensors", "snap-step-000005.json",
        "snap-step-000005.safetensors",
    ]  # fmt: skip


def test_lora_list_of_a_folder_of_other_lora_files_says_so(tmp_path):
    """A folder of downloaded LoRA files given to `lora list`: before (RELIABILITY 893) it printed
    the header line alone and exited 0, as for a run with no LoRA yet; now it says that the folder
    holds no run's LoRA and names the files that are not."""
    from lorastudio.cli.app import _register, app

    folder = tmp_path / "downloads"
    folder.mkdir()
    (folder / "someone-elses.safetensors").write_bytes(b"\0" * 16)
    _register()
    out = CliRunner().invoke(app, ["lora", "list", str(folder)])
    assert out.exit_code == 0, out.output
    assert f"no LoRA file of a run in {folder}" in out.output
    assert "someone-elses.safetensors" in out.output and "not a run's LoRAs" in out.output
