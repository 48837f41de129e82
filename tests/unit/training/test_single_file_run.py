"""Training and generating on a single-file SDXL checkpoint (the tiny model in SGM's layout,
tests/single_files.py) with the tiny folder as base_config: the engine resolves it, the loss
falls, the LoRA loads into the single-file pipeline, v_prediction changes the objective and the
pipeline's scheduler, and settings a base cannot honour are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from methods_cases import mini_config, mini_run

from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.training.loop import train
from single_files import write_sdxl_file, write_transformer_file


@pytest.fixture(scope="module")
def sdxl_file(tiny_model, tmp_path_factory) -> tuple[Path, Path]:
    folder = tiny_model("sdxl")
    return write_sdxl_file(folder, tmp_path_factory.mktemp("sf") / "finetune.safetensors"), folder


def test_loss_falls_on_the_single_file(sdxl_file):
    file, folder = sdxl_file
    run = mini_run(mini_config("sdxl", file, base_config=str(folder)), steps=4)
    assert all(b < a for a, b in zip(run.losses, run.losses[1:], strict=False)), run.losses
    eps = mini_run(mini_config("sdxl", folder), steps=1).losses[0]
    assert run.losses[0] == pytest.approx(eps, rel=1e-6)  # same weights, same maths as the folder


def test_loss_falls_on_a_flux_transformer_file(tiny_model, tmp_path):
    folder = tiny_model("flux")
    file = write_transformer_file(folder, tmp_path / "flux-finetune.safetensors")
    run = mini_run(mini_config("flux", file, base_config=str(folder)), steps=4)
    assert all(b < a for a, b in zip(run.losses, run.losses[1:], strict=False)), run.losses
    assert run.losses[0] == pytest.approx(mini_run(mini_config("flux", folder), steps=1).losses[0], rel=1e-6)


def test_v_prediction_changes_the_objective_and_the_scheduler(sdxl_file):
    file, folder = sdxl_file
    eps = mini_run(mini_config("sdxl", file, base_config=str(folder)), steps=1).losses[0]
    v = mini_run(mini_config("sdxl", file, base_config=str(folder), v_prediction=True), steps=1).losses[0]
    assert v != pytest.approx(eps, rel=1e-3)
    pipe = load_pipeline(str(file), "sdxl", base_config=str(folder), v_prediction=True, device="cpu")
    assert pipe.scheduler.config.prediction_type == "v_prediction"
    plain = load_pipeline(str(file), "sdxl", base_config=str(folder), device="cpu")
    assert plain.scheduler.config.prediction_type == "epsilon"


def test_train_then_generate_with_the_lora(sdxl_file, make_config):
    file, folder = sdxl_file
    events: list = []
    cfg = make_config(
        "sdxl", base_model=str(file), base_config=str(folder), sample_prompts=["a cat"], sample_steps=1
    )
    result = train(cfg, events.append, device="cpu")
    assert result.lora_path is not None and result.steps_run == 2
    (ready,) = [e for e in events if type(e).__name__ == "SampleReady"]  # the preview pipeline builds
    assert (result.lora_path.parent / ready.images[0]).is_file()
    import json

    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["config"]["base_model"] == str(file) and sidecar["config"]["base_config"] == str(folder)
    pipe = load_pipeline(str(file), "sdxl", base_config=str(folder), device="cpu")
    before = generate_image(pipe, "sdxl", prompt="a red circle", seed=1, steps=2, width=64, height=64)
    apply_loras(pipe, [(result.lora_path, 1.0)])
    after = generate_image(pipe, "sdxl", prompt="a red circle", seed=1, steps=2, width=64, height=64)
    assert before.size == after.size == (64, 64)
    assert before.tobytes() != after.tobytes()  # the LoRA took effect


def test_settings_a_base_cannot_honour_are_refused(sdxl_file, make_config, tiny_model):
    from lorastudio.settings import get_settings
    from lorastudio.training.preflight import preflight

    file, folder = sdxl_file
    marked = write_sdxl_file(folder, file.with_name("vpred.safetensors"), extra={"v_pred": torch.tensor([])})
    with pytest.raises(ConfigError) as err:
        preflight(make_config("sdxl", base_model=str(marked), base_config=str(folder), v_prediction=False),
                  get_settings(), "cpu")  # fmt: skip
    assert err.value.problems[0].field == "v_prediction" and "v_pred marker" in err.value.problems[0].message
    prepared = preflight(
        make_config("sdxl", base_model=str(marked), base_config=str(folder)), get_settings(), "cpu"
    )
    assert prepared.cfg.v_prediction is True and prepared.cfg.base_config == str(folder)
    with pytest.raises(ConfigError) as err:
        preflight(make_config("sdxl", base_config=str(folder), v_prediction=True), get_settings(), "cpu")
    assert {p.field for p in err.value.problems} == {"base_config", "v_prediction"}
    with pytest.raises(ConfigError, match="v_prediction"):
        parse_train_config({"family": "flux", "base_model": "x/y", "data_dir": "d", "v_prediction": True})


def test_cli_generate_with_a_single_file(sdxl_file, tmp_path):
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    file, folder = sdxl_file
    out = tmp_path / "img.png"
    args = ["generate", "--base", str(file), "--base-config", str(folder), "--prompt", "a red circle",
            "--out", str(out), "--steps", "1", "--width", "64", "--height", "64", "--device", "cpu"]  # fmt: skip
    done = CliRunner().invoke(app, [*args, "--v-prediction"])
    assert done.exit_code == 0, done.output
    assert out.is_file() and "wrote" in done.output  # the family read from the file's keys
    refused = CliRunner().invoke(app, [*args[:-2], "--family", "flux", "--overwrite"])
    assert refused.exit_code == 2 and "flux family takes single files of FLUX" in refused.output


def test_cli_check_names_the_file_and_its_config(sdxl_file, small_dataset, tmp_path, run_settings):
    import json as _json

    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    file, folder = sdxl_file
    settings = run_settings("sdxl", file, small_dataset, {"base_config": str(folder), "v_prediction": True})
    config = tmp_path / "run.toml"
    config.write_text("".join(f"{k} = {_json.dumps(v)}\n" for k, v in settings.items()))
    result = CliRunner().invoke(app, ["train", str(config), "--check", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert f"single file    {file} (SDXL checkpoint" in result.output
    assert f"with the configs of {folder}; v-prediction (v_prediction setting)" in result.output


def test_the_catalogue_lists_an_added_checkpoint_file(sdxl_file, tmp_path):
    from lorastudio.basemodels import add_folder, list_models
    from lorastudio.settings import get_settings

    file, _ = sdxl_file
    settings = get_settings()
    assert add_folder(settings, str(file)) == file
    entry = next(m for m in list_models(settings, hub_cache=False) if m.path == str(file))
    assert (entry.source, entry.kind, entry.family, entry.trainable) == ("added", "single-file", "sdxl", True)
    assert entry.size_bytes == file.stat().st_size
