"""`lorastudio train` and `lorastudio demo` through the real typer app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.cli.config_file import apply_overrides, localize_path, localize_paths
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    _register()


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_train_from_json_with_overrides(tiny_model, small_dataset, tmp_path, run_settings):
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", tiny_model("flux"), small_dataset, {})))
    result = _invoke(
        "train", str(config), "--set", "steps=3", "--set", "output_name=cli-run", "--device", "cpu"
    )
    assert result.exit_code == 0, result.output
    lora = get_settings().outputs_dir / "cli-run" / "cli-run.safetensors"
    assert lora.is_file() and str(lora) in result.output
    assert json.loads(lora.with_suffix(".json").read_text())["steps"] == 3


def test_train_says_which_loader_will_not_read_the_file_it_wrote(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """A DoRA file in the diffusers layout loses its magnitudes in ComfyUI (the sidecar's loader
    check): `train` says so beside the LoRA's path, not only in the sidecar; a LoRA gets no warning."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 1})))
    dora = _invoke(
        "train", str(config), "--set", "adapter=dora", "--set", "output_name=dora", "--device", "cpu"
    )
    assert dora.exit_code == 0, dora.output
    sidecar = json.loads((get_settings().outputs_dir / "dora" / "dora.json").read_text())
    assert sidecar["loaders"]["comfyui"]["ok"] is False  # the check this warning reports
    assert "warning: ComfyUI would not load this file as trained" in dora.output
    assert "lora_magnitude_vector" in dora.output
    lora = _invoke("train", str(config), "--set", "output_name=plain", "--device", "cpu")
    assert lora.exit_code == 0 and "would not load" not in lora.output


def test_train_takes_a_base_model_by_its_name_under_models(tiny_model, small_dataset, tmp_path, run_settings):
    """base_model = "NAME" means models/NAME for the CLI as for the job service; the sidecar
    records the folder the run loaded."""
    models = get_settings().models_dir
    models.mkdir(parents=True)
    (models / "my-flux").symlink_to(tiny_model("flux"), target_is_directory=True)
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", "my-flux", small_dataset, {"steps": 1})))
    result = _invoke("train", str(config), "--set", "output_name=named", "--device", "cpu")
    assert result.exit_code == 0, result.output
    sidecar = json.loads((get_settings().outputs_dir / "named" / "named.json").read_text())
    assert sidecar["base_model"] == str(tiny_model("flux").resolve())
    missing = _invoke("train", str(config), "--set", "base_model=no-such-model", "--device", "cpu")
    assert missing.exit_code == 2 and "neither a pipeline folder" in missing.output


def test_train_from_toml(tiny_model, small_dataset, tmp_path, run_settings):
    settings = run_settings("flux", tiny_model("flux"), small_dataset, {"lora_targets": ["to_q", "to_v"]})
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    config = tmp_path / "run.toml"
    config.write_text("\n".join(lines) + "\n")
    result = _invoke("train", str(config), "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert (get_settings().outputs_dir / "run" / "run.safetensors").is_file()


def test_unknown_keys_are_all_listed_and_exit_2(tiny_model, small_dataset, tmp_path, run_settings):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({**run_settings("flux", tiny_model("flux"), small_dataset, {}), "stpes": 3}))
    result = _invoke("train", str(config), "--set", "lora_rnak=8", "--set", "steps=-1")
    assert result.exit_code == 2
    for name in ("stpes", "lora_rnak", "steps"):
        assert name in result.output
    assert not get_settings().outputs_dir.exists() or not any(get_settings().outputs_dir.iterdir())


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("run.yaml", "steps: 1", "use a .json or .toml file"),
        ("run.json", "{not json", "cannot read"),
        ("run.json", "[1, 2]", "must be an object"),
    ],
)
def test_bad_config_files_exit_2(tmp_path, name, content, message):
    config = tmp_path / name
    config.write_text(content)
    result = _invoke("train", str(config))
    assert result.exit_code == 2 and message in result.output


def test_missing_config_file_exits_2(tmp_path):
    result = _invoke("train", str(tmp_path / "none.json"))
    assert result.exit_code == 2 and "not found" in result.output


def test_set_values_are_json_when_possible():
    out = apply_overrides(
        {"a": 1}, ["steps=5", "lr=1e-3", "name=my-run", "flag=true", 't=["to_q"]', "x=null"]
    )
    assert out == {"a": 1, "steps": 5, "lr": 1e-3, "name": "my-run", "flag": True, "t": ["to_q"], "x": None}
    with pytest.raises(ConfigError, match="not key=value"):
        apply_overrides({}, ["steps"])


def test_a_set_value_of_a_text_setting_stays_the_text_typed(tiny_model, small_dataset, tmp_path):
    """`--set trigger_word=123` was read as the JSON number 123 and refused ("trigger_word:
    Input should be a valid string"), and so were `output_name=2024` and a `revision` of digits:
    the shell gives text, and a setting that takes only text keeps it as typed."""
    out = apply_overrides(
        {}, ["trigger_word=123", "output_name=2024", "revision=1e5", "default_caption=true"]
    )
    assert out == {"trigger_word": "123", "output_name": "2024", "revision": "1e5", "default_caption": "true"}
    assert apply_overrides({}, ["trigger_word=null", "steps=7", "validation_split=0.25"]) == {
        "trigger_word": None, "steps": 7, "validation_split": 0.25,
    }  # fmt: skip
    config = tmp_path / "c.json"
    config.write_text(
        json.dumps({"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(small_dataset)})
    )
    result = _invoke(
        "train", str(config), "--check", "--set", "trigger_word=123", "--set", "output_name=2024"
    )
    assert result.exit_code == 0, result.output
    assert "output_name    2024" in result.output


def test_config_paths_are_taken_from_where_the_command_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "owner" / "local-model").mkdir(parents=True)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "pony.safetensors").write_bytes(b"")
    data = {
        "data_dir": "shots/dogs", "base_model": "~/models/flux", "steps": 3, "output_name": "a/b",
        "base_config": "owner/local-model",
    }  # fmt: skip
    assert localize_paths(data) == {
        "data_dir": str(tmp_path / "shots" / "dogs"),  # a path even if it does not exist (yet)
        "base_model": str(tmp_path / "home" / "models" / "flux"),
        "steps": 3,
        "output_name": "a/b",  # only the path settings are touched
        "base_config": str(tmp_path / "owner" / "local-model"),
    }
    assert localize_path("ckpt/pony.safetensors", may_be_hub_id=True) == str(
        tmp_path / "ckpt" / "pony.safetensors"
    )
    assert localize_path("black-forest-labs/FLUX.1-dev", may_be_hub_id=True) == "black-forest-labs/FLUX.1-dev"
    assert localize_path("owner/local-model", may_be_hub_id=True) == str(tmp_path / "owner" / "local-model")
    assert localize_path("./flux", may_be_hub_id=True) == str(tmp_path / "flux")
    assert localize_path("tiny-flux", may_be_hub_id=True) == "tiny-flux"  # a name under models/
    assert localize_path("sample", may_be_hub_id=False) == "sample"  # a dataset under datasets/
    assert localize_path("/abs/x", may_be_hub_id=False) == "/abs/x"


def test_demo_trains_and_generates_in_the_studio_home():
    started = time.perf_counter()
    result = _invoke("demo", "--steps", "4")
    assert result.exit_code == 0, result.output
    assert time.perf_counter() - started < 30
    home = get_settings()
    (run,) = list(home.outputs_dir.iterdir())
    names = sorted(p.name for p in run.iterdir())
    assert names == sorted(
        [f"{run.name}.json", f"{run.name}.safetensors", "sample_base.png", "sample_lora.png"]
    )
    assert (home.models_dir / "tiny-flux" / "model_index.json").is_file()
    assert len(list((home.datasets_dir / "sample").glob("*.png"))) == 8
    assert str(run / f"{run.name}.safetensors") in result.output


def test_demo_of_an_unknown_family_exits_2():
    result = _invoke("demo", "--family", "nope")
    assert result.exit_code == 2 and "valid families" in result.output
    assert not get_settings().outputs_dir.exists()


@pytest.mark.slow
def test_demo_command_finishes_in_under_30_seconds(tmp_path):
    exe = Path(sys.executable).with_name("lorastudio")
    env = {**os.environ, "LORASTUDIO_HOME": str(tmp_path / "home")}
    started = time.perf_counter()
    done = subprocess.run([str(exe), "demo"], env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert elapsed < 30, f"the demo took {elapsed:.1f} s"
    assert "sample_lora.png" in done.stdout


def test_families_lists_each_familys_own_settings():
    result = CliRunner().invoke(app, ["families"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = {line.split("\t")[0]: line for line in result.output.splitlines()[1:]}  # piped: tab-separated
    assert "snr_gamma, noise_offset" in rows["sdxl"] and "guidance" not in rows["sdxl"]
    assert "guidance" in rows["flux"] and "noise_offset" not in rows["flux"]
