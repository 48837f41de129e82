"""Every bad input: a clear error of the right class, one Error event, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError, DatasetError, ModelSourceError
from lorastudio.settings import get_settings
from lorastudio.training.events import Error
from lorastudio.training.loop import train


def _fails(cfg, error: type[Exception], match: str) -> list:
    events: list = []
    outputs = get_settings().outputs_dir
    before = sorted(outputs.rglob("*")) if outputs.exists() else []
    with pytest.raises(error, match=match) as info:
        train(cfg, events.append, device="cpu")
    assert [type(e) for e in events if e.type in ("error", "complete")] == [Error]
    assert events[-1].message == str(info.value)
    after = sorted(outputs.rglob("*")) if outputs.exists() else []
    assert after == before  # nothing written, nothing left behind
    return events


def test_missing_dataset(make_config, tmp_path):
    events = _fails(make_config(data_dir=str(tmp_path / "nope")), DatasetError, "nope")
    assert len(events) == 1  # failed before any model loaded


def test_empty_dataset_folder(make_config, tmp_path):
    _fails(make_config(data_dir=str(tmp_path)), DatasetError, "no images")


def test_uncaptioned_images_without_trigger_are_listed(make_config, small_dataset, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    txts = sorted(data.glob("*.txt"))
    for txt in txts[:2]:
        txt.unlink()
    with pytest.raises(DatasetError) as info:
        train(make_config(data_dir=str(data)), [].append, device="cpu")
    for txt in txts[:2]:
        assert any(txt.stem in p for p in info.value.problems)
    # a trigger word (or a default caption) makes the same folder trainable: checked elsewhere


def test_bad_resolution(make_config):
    _fails(make_config(resolution=40), ConfigError, "resolution: must be a multiple of 16")


def test_existing_output_name(make_config):
    run = get_settings().outputs_dir / "taken"
    run.mkdir(parents=True)
    (run / "keep.txt").write_text("mine")
    _fails(make_config(output_name="taken"), ConfigError, "already exists")
    assert (run / "keep.txt").read_text() == "mine"


def test_fp16_on_cpu(make_config):
    _fails(make_config(base_precision="fp16"), ConfigError, "fp16 needs a CUDA GPU")


def test_all_config_problems_are_reported_at_once(make_config):
    run = get_settings().outputs_dir / "run"
    run.mkdir(parents=True)
    cfg = make_config(base_precision="fp16", lr_warmup_steps=5, timestep_sampling="uniform", logit_std=2.0)
    with pytest.raises(ConfigError) as info:
        train(cfg, [].append, device="cpu")
    fields = {p.field for p in info.value.problems}
    assert fields == {"base_precision", "lr_warmup_steps", "logit_std", "output_name"}


def test_missing_base_model(make_config, tmp_path):
    _fails(make_config(base_model=str(tmp_path / "model")), ModelSourceError, "base model folder not found")


def test_base_model_of_another_family(make_config, tiny_model):
    _fails(make_config(base_model=str(tiny_model("z-image"))), ModelSourceError, "ZImagePipeline")


def test_incomplete_model_folder(make_config, tiny_model, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model("flux"), model)
    shutil.rmtree(model / "vae")
    _fails(make_config(base_model=str(model)), ModelSourceError, "missing component folder.*vae")


def test_revision_with_a_local_folder(make_config):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="revision"):  # the config refuses it (RELIABILITY 411)
        make_config(revision="main")
    # a config built without validation: the resolver's rule (basemodels.resolve_base) refuses it
    _fails(make_config().model_copy(update={"revision": "main"}), ConfigError, "revision.*local folder")


def test_not_a_pipeline_folder(make_config, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({}))
    _fails(make_config(base_model=str(tmp_path)), ModelSourceError, "no model_index.json")


def test_unknown_lora_target_is_refused_before_loading_and_at_the_load_cleans_up(make_config, monkeypatch):
    events = _fails(make_config(lora_targets=["to_q", "no_such_layer"]), ConfigError, "no_such_layer")
    assert [e.type for e in events] == ["error"]  # the preflight's meta denoiser: nothing loaded
    import lorastudio.training.preflight as preflight_module

    monkeypatch.setattr(preflight_module, "planned_target_problems", lambda cfg, family: [])  # unread config
    events = _fails(make_config(lora_targets=["to_q", "no_such_layer"]), ConfigError, "no_such_layer")
    assert any(e.type == "model_load_started" and e.component == "denoiser" for e in events)
    assert not (get_settings().outputs_dir / "run").exists()


def test_unknown_device(make_config):
    events: list = []
    with pytest.raises(ConfigError, match="device"):
        train(make_config(), events.append, device="tpu")
    assert [e.type for e in events] == ["error"]


def test_outputs_of_a_failed_run_are_not_left_behind(make_config, tmp_path):
    """A crash mid-run (here: the dataset vanishes after preflight) removes the run folder."""
    data = tmp_path / "data"
    shutil.copytree(Path(make_config().data_dir), data)
    events: list = []

    def vanish_during_run() -> None:
        shutil.rmtree(data, ignore_errors=True)  # images disappear while latents are cached
        return None

    with pytest.raises(Exception):  # noqa: B017 (whatever the crash, the folder must go)
        train(make_config(data_dir=str(data)), events.append, vanish_during_run, device="cpu")
    assert events[-1].type == "error"
    assert not (get_settings().outputs_dir / "run").exists()


def test_fp8_on_cpu(make_config):
    _fails(
        make_config(base_precision="fp8"),
        ConfigError,
        "fp8 needs an NVIDIA GPU of compute capability 8.9 or newer .*this run is on the cpu",
    )


@pytest.mark.parametrize("precision", ["int8", "nf4"])
def test_quantised_bases_pass_preflight_on_cpu_and_compute_in_bf16(make_config, precision):
    import torch

    from lorastudio.training.precision import is_quantised, pick_dtype
    from lorastudio.training.preflight import preflight

    run = preflight(make_config(base_precision=precision), get_settings(), "cpu")
    assert run.dtype == torch.bfloat16  # the compute dtype; quantize.py stores the weights
    assert is_quantised(precision) and not is_quantised("bf16") and not is_quantised("fp8")
    with pytest.raises(ConfigError, match="compute capability 8.9"):
        pick_dtype("fp8", torch.device("cpu"))


@pytest.fixture
def schnell_like(tiny_model, tmp_path) -> Path:
    """The tiny FLUX.1 pipeline whose transformer config says guidance_embeds false, as FLUX.1
    schnell's does (no guidance embedding: the denoiser takes no guidance value)."""
    base = tmp_path / "tiny-schnell"
    shutil.copytree(tiny_model("flux"), base)
    config = base / "transformer" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "guidance_embeds": False}))
    return base


def test_guidance_for_a_base_without_a_guidance_embedding_is_refused(
    make_config, schnell_like, small_dataset
):
    """FLUX.1 schnell has no guidance embedding: a guidance value would be ignored, so the engine
    refuses it before any model loads, and so does the job service's validation (its configs read
    from disk); the family's default (what a clone of a run carries) or none trains."""
    from lorastudio.jobs.validation import validate_run

    events = _fails(
        make_config(base_model=str(schnell_like), guidance=4.0),
        ConfigError,
        "guidance: .*no guidance embedding",
    )
    assert not any(e.type == "model_load_started" for e in events)
    settings = get_settings()
    shutil.copytree(small_dataset, settings.datasets_dir / "shapes", dirs_exist_ok=True)
    raw = {"family": "flux", "base_model": str(schnell_like), "data_dir": "shapes", "guidance": 4.0}
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    assert [p.field for p in err.value.problems] == ["guidance"]
    assert "4 would be ignored" in err.value.problems[0].message
    validate_run({**raw, "guidance": 1.0}, settings, live_output_names=set())
    result = train(make_config(base_model=str(schnell_like), guidance=1.0, steps=1), [].append, device="cpu")
    assert result.steps_run == 1


def test_a_lora_target_that_is_no_linear_layer_is_refused_by_name(make_config):
    """FLUX.1's norm1 is an AdaLayerNormZero block: peft raised a bare ValueError (a traceback
    from the CLI); the run is refused naming the target, its class and the layers inside it."""
    events = _fails(make_config(lora_targets=["to_q", "norm1"]), ConfigError, "lora_targets: 'norm1' names")
    (error,) = [e for e in events if e.type == "error"]
    assert (
        "AdaLayerNormZero modules" in error.message and "the layers inside it: norm1.linear" in error.message
    )
    result = train(make_config(lora_targets=["norm1.linear"], output_name="inside"), [].append, device="cpu")
    assert result.steps_run == 2


def test_a_folder_mixing_models_fails_before_any_load_naming_the_component(make_config, tiny_model, tmp_path):
    """An SDXL VAE in a FLUX.1 folder: every file is there, the run used to load for minutes."""
    model = Path(shutil.copytree(tiny_model("flux"), tmp_path / "model"))
    shutil.rmtree(model / "vae")
    shutil.copytree(tiny_model("sdxl") / "vae", model / "vae")
    events = _fails(
        make_config(base_model=str(model)), ModelSourceError, "vae/config.json: latent_channels 4"
    )
    assert len(events) == 1  # failed before any model loaded


def test_weights_of_another_model_under_the_right_config_fail_before_any_load(
    make_config, tiny_model, tmp_path
):
    """FLUX.1's VAE config over SDXL's VAE weights: the configs agree, the weights do not (the run
    used to fail in the VAE's load, after the text encoders had loaded and encoded)."""
    model = Path(shutil.copytree(tiny_model("flux"), tmp_path / "model"))
    (weights,) = (model / "vae").glob("*.safetensors")
    shutil.copy(tiny_model("sdxl") / "vae" / weights.name, weights)
    events = _fails(
        make_config(base_model=str(model)),
        ModelSourceError,
        r"vae/diffusion_pytorch_model.safetensors: encoder.conv_out.weight is \[8, 32, 3, 3\]",
    )
    assert len(events) == 1  # failed before any model loaded


def test_several_entries_scan_problems_beside_others_name_each_entrys_field(make_config, monkeypatch):
    """RELIABILITY 1774: the engine's preflight (a CLI `train` without the service) named every
    entry's scan problem under `datasets` (one problem, the joined message)."""
    from lorastudio.data.entries import EntryScanError
    from lorastudio.errors import FieldProblem
    from lorastudio.training import preflight as pf
    from lorastudio.training import verdict

    scanned = [(0, "k0/10_ball: no images"), (2, "k1/5_dog: no images")]  # entry 2: config entry 1's

    def fails(*_a, **_k):
        raise EntryScanError("2 dataset problem(s)", scanned, {0: 0, 1: 0, 2: 1})

    monkeypatch.setattr(pf, "_preflight", fails)
    monkeypatch.setattr(verdict, "every_problem", lambda *a, **k: [FieldProblem("steps", "too few")])
    with pytest.raises(ConfigError) as info:
        pf.preflight(make_config(), get_settings(), None)
    assert [(p.field, p.message) for p in info.value.problems] == [
        ("datasets.0.path", "k0/10_ball: no images"),
        ("datasets.1.path", "k1/5_dog: no images"),
        ("steps", "too few"),
    ]
