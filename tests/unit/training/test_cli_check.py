"""`lorastudio train --check`, every problem of a CLI run at once, `--overwrite` and the free
name suggested for a taken output_name, "did you mean" for a misspelt setting (issue 30)."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.settings import get_settings

MISSING_TRACKERS = [n for n in ("tensorboard", "wandb") if importlib.util.find_spec(n) is None]


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    if not app.registered_commands:
        _register()


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _config(tmp_path, settings: dict, name: str = "run.toml"):
    path = tmp_path / name
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    return path


def test_check_prints_the_preflight_report_and_trains_nothing(
    tiny_model, small_dataset, tmp_path, run_settings
):
    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 7}))
    result = _invoke("train", str(config), "--check", "--device", "cpu")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "would train" in out and "family         flux" in out
    assert "4 used of 4 found" in out  # the dataset's counts
    assert "steps          7" in out and "base_precision" in out  # schedule and plan
    assert "time: ~" in out and "(guess: a guess" in out and "first_step" in out  # no run here yet
    assert not (get_settings().outputs_dir / "run").exists()


def test_check_refuses_targets_the_denoiser_cannot_honour(tiny_model, small_dataset, tmp_path, run_settings):
    """--check said "would train" for a lora_targets entry naming no wrappable layer; the run was
    then refused (since the engine's preflight: before any load). --check now says so too."""
    over = {"adapter": "lokr", "lora_targets": ["ff"], "rank_pattern": {"to_q": 2}}
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", tiny_model("flux"), small_dataset, over)))
    result = _invoke("train", str(config), "--check", "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert "would train" not in result.output
    assert "lora_targets: 'ff' names FeedForward modules" in result.output
    fixed = _invoke("train", str(config), "--check", "--device", "cpu", "--set", 'lora_targets=["to_q"]')
    assert fixed.exit_code == 0 and "would train" in fixed.output, fixed.output


def test_check_states_the_validation_hold_out_and_the_masks(
    tiny_model, small_dataset, tmp_path, run_settings
):
    data = tmp_path / "masked"
    data.mkdir()
    for path in small_dataset.iterdir():
        (data / path.name).write_bytes(path.read_bytes())
    (data / "masks").mkdir()
    first = sorted(data.glob("*.png"))[0]
    (data / "masks" / first.name).write_bytes(first.read_bytes())  # a mask of the image's size
    over = {"validation_split": 0.25, "validate_every": 5, "steps": 10, "unmasked_weight": 0.1}
    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), data, over))
    result = _invoke("train", str(config), "--check", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "masks          1 image(s) (masks/ folder)" in result.output
    assert "validation     1 held out (1 of 4 images of" in result.output and "every 5 steps" in result.output
    assert "warning: 2 image(s) have no mask and train unmasked" in result.output  # 3 train, 1 masked


def test_check_runs_beside_a_server_that_owns_the_home(tiny_model, small_dataset, tmp_path, run_settings):
    """--check trains and writes nothing: it was refused with "a lorastudio server owns the
    studio home" like a real run (which still is), so a CLI user could not preflight a config
    while the server trained."""
    from lorastudio.jobs.homelock import HomeLock

    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 3}))
    with HomeLock.for_server(get_settings().home, 7999):
        checked = _invoke("train", str(config), "--check", "--device", "cpu")
        assert checked.exit_code == 0, checked.output
        assert "would train" in checked.output
        trained = _invoke("train", str(config), "--device", "cpu")
        assert trained.exit_code == 1 and "owns the studio home" in trained.output  # a real run: could not
    assert not (get_settings().outputs_dir / "run").exists()


def test_check_lists_every_problem_and_exits_2(tiny_model, tmp_path, run_settings):
    settings = run_settings("flux", tiny_model("flux"), tmp_path / "no-such-dataset", {"lerning_rate": 1e-4})
    result = _invoke("train", str(_config(tmp_path, settings)), "--check", "--set", "lora_rank=0")
    assert result.exit_code == 2
    assert "lerning_rate" in result.output and "did you mean learning_rate" in result.output
    assert "lora_rank" in result.output


@pytest.mark.parametrize("flags", [("--check",), ("--overwrite",), ()])
def test_an_output_name_over_the_file_systems_limit_is_refused_by_the_field(
    tiny_model, small_dataset, tmp_path, run_settings, flags
):
    """A 300-character output_name was looked up on disk before the config was validated: an
    OSError (ENAMETOOLONG) traceback instead of the field's own refusal."""
    get_settings().outputs_dir.mkdir(parents=True, exist_ok=True)  # else the lookup stops at ENOENT
    settings = run_settings("flux", tiny_model("flux"), small_dataset, {"output_name": "x" * 300})
    result = _invoke("train", str(_config(tmp_path, settings)), *flags, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert "output_name" in result.output and "at most 100 characters" in result.output
    assert not isinstance(result.exception, OSError)
    assert not any(get_settings().outputs_dir.iterdir())


def test_rerun_names_overwrite_and_a_free_name_with_the_other_problems(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """Re-running a TOML whose output exists: the output_name problem does not hide a missing
    data_dir; it names --overwrite and a free name (NAME-2, NAME-3 when NAME-2 is taken too)."""
    outputs = get_settings().outputs_dir
    (outputs / "run").mkdir(parents=True)
    (outputs / "run" / "run.safetensors").write_bytes(b"old")
    (outputs / "run-2").mkdir()
    (outputs / "run-2" / "run-2.json").write_text(
        "{}"
    )  # a run's (an empty folder is a killed run's: removed)
    missing = tmp_path / "gone"
    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), missing, {}))
    result = _invoke("train", str(config), "--device", "cpu")
    assert result.exit_code == 2
    assert "--overwrite" in result.output and "output_name=run-3" in result.output
    assert "data_dir" in result.output and "gone" in result.output
    assert (outputs / "run" / "run.safetensors").read_bytes() == b"old"


def test_overwrite_replaces_the_previous_runs_outputs(tiny_model, small_dataset, tmp_path, run_settings):
    outputs = get_settings().outputs_dir
    (outputs / "run").mkdir(parents=True)
    (outputs / "run" / "stale.txt").write_text("old")
    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 1}))
    assert _invoke("train", str(config), "--check", "--overwrite", "--device", "cpu").exit_code == 0
    assert (outputs / "run" / "stale.txt").exists()  # --check changes nothing
    result = _invoke("train", str(config), "--overwrite", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert not (outputs / "run" / "stale.txt").exists()
    assert (outputs / "run" / "run.safetensors").is_file()


@pytest.mark.parametrize("interrupt", ["stop", "abort"])
def test_an_interrupted_preparation_leaves_no_folder(interrupt, make_config):
    """Ctrl-C (stop) or a second Ctrl-C (KeyboardInterrupt) once the run claimed its folder and
    before its first step: the output name stays free for the next run."""
    from lorastudio.training.events import StopRequest
    from lorastudio.training.loop import train

    folder = get_settings().outputs_dir / "interrupted"
    seen = []

    def stop() -> StopRequest | None:
        seen.append(folder.is_dir())
        return StopRequest(save=True) if interrupt == "stop" and folder.is_dir() else None

    def emit(event: object) -> None:
        seen.append(folder.is_dir())
        if interrupt == "abort" and folder.is_dir() and type(event).__name__ != "Error":
            raise KeyboardInterrupt

    cfg = make_config("flux", output_name="interrupted")
    if interrupt == "abort":
        with pytest.raises(KeyboardInterrupt):
            train(cfg, emit, stop, device="cpu")
    else:
        assert train(cfg, emit, stop, device="cpu").lora_path is None
    assert any(seen), "the run never claimed its folder"
    assert not folder.exists()


@pytest.mark.parametrize("flag", ["--check", "--overwrite"])
def test_check_and_overwrite_are_refused_with_resume(flag, tmp_path):
    result = _invoke("train", "--resume", str(tmp_path), flag)
    assert result.exit_code == 2 and flag in result.output and "--resume" in result.output


def test_check_without_a_config_asks_for_one_and_names_no_resume():
    """`train --check --set ...` with no config file and no --resume said --check "applies to a
    fresh run's config file, not to a --resume": a --resume the user never gave."""
    result = _invoke("train", "--check", "--set", "steps=2")
    assert result.exit_code == 2, result.output
    assert "config: give a config file" in result.output
    assert "not to a --resume" not in result.output


def test_check_of_a_toml_with_datasets_entries_lists_each_entry(
    tiny_model, small_dataset, tmp_path, run_settings, monkeypatch
):
    """[[datasets]] tables in the TOML (paths relative to where the command runs): each entry's
    count and share in the report."""
    raw = run_settings("flux", tiny_model("flux"), small_dataset, {})
    del raw["data_dir"]
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in raw.items())
    (tmp_path / "more").mkdir()
    for p in sorted(small_dataset.iterdir())[:2]:
        (tmp_path / "more" / p.name).write_bytes(p.read_bytes())
    text += f'[[datasets]]\npath = "{small_dataset}"\nrepeats = 2\n[[datasets]]\npath = "./more"\nloss_weight = 0.5\n'
    (tmp_path / "run.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["train", str(tmp_path / "run.toml"), "--check", "--device", "cpu"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert (
        f"entry          {small_dataset}: 4 image(s) x2 -> 8 per epoch (88.9%), loss weight 1"
        in result.output
    )
    assert f"{tmp_path / 'more'}: 1 image(s) x1 -> 1 per epoch (11.1%), loss weight 0.5" in result.output
    several = CliRunner().invoke(
        app,
        ["train", str(tmp_path / "run.toml"), "--check", "--device", "cpu", "--set", "resolution=[32, 64]"],
    )
    assert several.exit_code == 0, several.output
    assert "  buckets 32     32x32: " in several.output and "  buckets 64     " in several.output


def test_check_says_what_a_flux2_run_trains(tiny_model, small_dataset, small_pairs, tmp_path, run_settings):
    """FLUX.2 trains text-to-image without controls and reference editing with them: --check says which."""
    plain = _config(
        tmp_path, run_settings("flux2-klein", tiny_model("flux2-klein"), small_dataset, {}), "plain.toml"
    )
    out = _invoke("train", str(plain), "--check", "--device", "cpu").output
    assert "trains         text-to-image: no control images" in out and "pairs" not in out
    paired = _config(
        tmp_path, run_settings("flux2-klein", tiny_model("flux2-klein"), small_pairs, {}), "pairs.toml"
    )
    out = _invoke("train", str(paired), "--check", "--device", "cpu").output
    assert "trains         edit: every sample edits with its reference images (1 per sample)" in out
    assert "pairs          4 (up to 1 control(s) each; from control/)" in out


def test_check_marks_a_regularisation_entry_and_states_preservation(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """A reg entry's line says its loss weight includes prior_loss_weight; the schedule states
    differential output preservation with its cost per step."""
    raw = run_settings(
        "flux", tiny_model("flux"), small_dataset, {"trigger_word": "sks", "prior_loss_weight": 0.5}
    )
    del raw["data_dir"]
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in raw.items())
    text += 'preservation = {class_word = "shape", prompts = ["a shape", "a star"]}\n'
    reg = shutil.copytree(small_dataset, tmp_path / "reg")  # one entry per folder
    text += f'[[datasets]]\npath = "{small_dataset}"\n[[datasets]]\npath = "{reg}"\nregularisation = true\n'
    (tmp_path / "run.toml").write_text(text)
    result = _invoke("train", str(tmp_path / "run.toml"), "--check", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "loss weight 0.5 (regularisation: x prior_loss_weight)" in result.output
    assert (
        "  preservation   the base model's output on 2 prompt(s), weight 1: one extra no-grad forward + one "
        "extra forward/backward per micro-batch" in result.output
    )
    prompts = json.dumps([f"p{i}" for i in range(10)])
    (tmp_path / "many.toml").write_text(text.replace('["a shape", "a star"]', prompts))
    many = _invoke("train", str(tmp_path / "many.toml"), "--check", "--device", "cpu")
    assert many.exit_code == 0, many.output
    assert "only the first 8 prompt(s) are used (dataset sample i takes prompt i)" in many.output


def test_check_reports_the_host_refusals_with_the_configs_other_problems(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """lion8bit on this CPU host was only refused once the config's other problems were fixed."""
    over = {"steps": 3, "lora_rank": 0, "optimizer": "lion8bit", "attention_backend": "efficient"}
    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, over))
    result = _invoke("train", str(config), "--check", "--device", "cpu")
    assert result.exit_code == 2, result.output
    out = result.output
    assert "lora_rank" in out and "8-bit CUDA kernels" in out and "'efficient' is a CUDA kernel" in out
    assert out.count("8-bit CUDA kernels") == 1


@pytest.mark.skipif(not MISSING_TRACKERS, reason="every tracker package is installed here")
def test_train_reports_the_plan_and_tracker_refusals_with_the_configs_other_problems(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """memory_budget_gb / offload_blocks on this CPU host and a report_to tracker whose package is
    missing were refused only once the config's other problems were fixed (a second answer)."""
    tracker = MISSING_TRACKERS[0]
    over = {"steps": 3, "lora_rank": 0, "memory_budget_gb": 8, "offload_blocks": 2, "report_to": [tracker]}
    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, over))
    for args in (("--check",), ()):
        result = _invoke("train", str(config), *args, "--device", "cpu")
        assert result.exit_code == 2, result.output
        out = " ".join(result.output.split())  # the report wraps long lines
        assert "lora_rank" in out, out
        assert out.count("measured on a CUDA GPU") == 1, out
        assert out.count("block swap moves weights") == 1, out
        assert out.count(f"needs the {tracker} package") == 1, out


def test_check_says_a_text_encoder_run_encodes_its_captions_every_step(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """README: with train_text_encoder captions are encoded in every step instead of once, and
    the preflight says so (the report's `conditioning`, printed by --check)."""
    settings = run_settings("sdxl", tiny_model("sdxl"), small_dataset, {"train_text_encoder": True})
    result = _invoke("train", str(_config(tmp_path, settings)), "--check", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "conditioning   train_text_encoder" in result.output and "encoded in every step" in result.output
    plain = _invoke(
        "train", str(_config(tmp_path, {**settings, "train_text_encoder": False}, "b.toml")), "--check"
    )
    assert plain.exit_code == 0 and "conditioning" not in plain.output, plain.output


def test_check_refuses_a_folder_mixing_models(tiny_model, small_dataset, tmp_path, run_settings):
    model = tmp_path / "mixed"
    shutil.copytree(tiny_model("z-image"), model)
    shutil.rmtree(model / "text_encoder")
    shutil.copytree(tiny_model("flux2-klein") / "text_encoder", model / "text_encoder")
    config = _config(tmp_path, run_settings("z-image", model, small_dataset, {}))
    result = _invoke("train", str(config), "--check", "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert "would train" not in result.output
    assert "text_encoder/config.json: hidden_size 16, Z-Image's transformer takes 32" in " ".join(
        result.output.split()
    )


def test_check_refuses_a_device_the_run_would_refuse(tiny_model, small_dataset, tmp_path, run_settings):
    """`train --check --device cuda` on a host without CUDA printed "would train ... device cpu"
    and exited 0, while the same command without --check was refused ("'cuda' requested but no
    CUDA GPU is available"): --check promises 0 only when the run would start. Now the device
    is checked as the run's start checks it, with the other problems."""
    import torch

    config = _config(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 3}))
    devices = {"mps": "unsupported device type 'mps'"}  # a type the engine does not run, on any host
    if not torch.cuda.is_available():
        devices["cuda"] = "'cuda' requested but no CUDA GPU is available"
    for device, said in devices.items():
        for args in (["--check"], []):
            result = _invoke("train", str(config), *args, "--device", device, "--set", "steps=0")
            assert result.exit_code == 2, result.output
            assert said in result.output and "steps" in result.output, result.output  # with the rest
    assert not (get_settings().outputs_dir / "run").exists()


def test_check_names_bad_targets_beside_the_other_problems(tiny_model, tmp_path, run_settings):
    """`--check` asked the denoiser about lora_targets only once everything else passed: a config
    with another problem too was refused naming that one, and its targets only after it was fixed,
    where the API's preflight names both at once (RELIABILITY 684, found by the fuzz audit)."""
    over = {"lora_targets": ["ff"]}
    settings = run_settings("flux", tiny_model("flux"), tmp_path / "no-such-dataset", over)
    result = _invoke("train", str(_config(tmp_path, settings)), "--check", "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert "data_dir" in result.output
    assert "lora_targets: 'ff' names FeedForward modules" in result.output
