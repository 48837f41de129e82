"""Cheap checks before anything is spawned: every problem at once, paths kept under the roots."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings


def _cfg(model: Path, **over: object) -> dict:
    return {
        "family": "flux",
        "base_model": str(model),
        "data_dir": "shapes",
        "resolution": 32,
        "steps": 3,
        **over,
    }


def _fields(err: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return {p.field: p.message for p in err.value.problems}


def test_a_good_request_resolves_paths_and_keeps_the_given_fields(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    run = validate_run(_cfg(tiny_model("flux")), settings, live_output_names=set())
    assert run.config.data_dir == str(shapes.resolve())
    assert run.config.base_model == str(tiny_model("flux").resolve())
    assert run.config.lora_rank is not None and run.config.output_name  # family defaults filled
    assert run.worker_config.output_name == run.config.output_name  # one name for both
    assert "lora_rank" not in run.worker_config.model_fields_set  # the worker re-resolves defaults
    assert len(run.scan.items) == 8

    report = preflight_report(run)
    assert report["dataset"]["images_used"] == 8
    assert sum(report["dataset"]["buckets"].values()) == 8
    assert report["schedule"]["steps"] == 3
    assert report["precision"]["base_dtype"] == "fp32"  # CPU host: auto -> fp32
    assert report["memory"]["estimated_gb"] > 0
    json.dumps(report, allow_nan=False)


def test_every_problem_is_reported_at_once(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    (settings.outputs_dir / "taken").mkdir(parents=True)
    raw = _cfg(tiny_model("flux"), lora_rank=0, bogus=1, output_name="taken", base_precision="fp16")
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    fields = _fields(err)
    assert {"lora_rank", "bogus", "base_precision"} <= set(fields)
    assert "not available on this host" in fields["base_precision"]

    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(tiny_model("flux"), output_name="taken"), settings, live_output_names=set())
    assert "already exists" in _fields(err)["output_name"]

    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(tiny_model("flux"), output_name="busy"), settings, live_output_names={"busy"})
    assert "queued or running" in _fields(err)["output_name"]


def test_base_model_of_another_family_or_incomplete_is_refused(
    settings: Settings,
    shapes: Path,
    tiny_model: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError) as err:
        validate_run(
            _cfg(tiny_model("flux"), family="sdxl", resolution=64), settings, live_output_names=set()
        )
    assert "FluxPipeline" in _fields(err)["base_model"]

    broken = Path(shutil.copytree(tiny_model("flux"), tmp_path / "broken"))
    shutil.rmtree(broken / "transformer")
    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(broken), settings, live_output_names=set())
    assert "transformer" in _fields(err)["base_model"]

    mixed = Path(shutil.copytree(tiny_model("flux"), tmp_path / "mixed"))
    shutil.rmtree(mixed / "vae")
    shutil.copytree(tiny_model("sdxl") / "vae", mixed / "vae")  # the API's start: before any load
    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(mixed), settings, live_output_names=set())
    assert "vae/config.json: latent_channels 4, FLUX.1's transformer takes 16" in _fields(err)["base_model"]

    shapes_off = Path(shutil.copytree(tiny_model("flux"), tmp_path / "weights-off"))
    weights = shapes_off / "text_encoder" / "model.safetensors"  # a CLIP of another width's weights
    shutil.copy(tiny_model("sdxl") / "text_encoder_2" / "model.safetensors", weights)
    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(shapes_off), settings, live_output_names=set())
    assert "token_embedding.weight is [883, 64]" in _fields(err)["base_model"]

    for bad in ("not a hub id", "../up/model", str(tmp_path / "missing")):
        with pytest.raises(ConfigError) as err:
            validate_run(_cfg(tiny_model("flux"), base_model=bad), settings, live_output_names=set())
        assert "base_model" in _fields(err)
    with pytest.raises(ConfigError) as err:  # offline (as the suite runs): a hub id not on disk
        validate_run(_cfg(tiny_model("flux"), base_model="owner/model"), settings, live_output_names=set())
    assert "offline" in _fields(err)["base_model"]

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub = validate_run(_cfg(tiny_model("flux"), base_model="owner/model"), settings, live_output_names=set())
    assert hub.model_dir is None and hub.config.base_model == "owner/model"


@pytest.mark.parametrize("data_dir", ["../outside", "/etc", "shapes/../../x", "escape"])
def test_dataset_paths_outside_the_root_are_refused(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], tmp_path: Path, data_dir: str
) -> None:
    outside = tmp_path / "outside-ds"
    shutil.copytree(shapes, outside)
    os.symlink(outside, settings.datasets_dir / "escape")  # a symlink inside that points out
    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(tiny_model("flux"), data_dir=data_dir), settings, live_output_names=set())
    assert "data_dir" in _fields(err)


def test_dataset_problems_are_listed_per_file(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    (shapes / "broken.png").write_bytes(b"not a png")
    (shapes / next(shapes.glob("*.txt")).name).unlink()
    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(tiny_model("flux")), settings, live_output_names=set())
    messages = [p.message for p in err.value.problems if p.field == "data_dir"]
    assert any("broken.png" in m for m in messages)
    assert any("no caption" in m for m in messages)


def test_settings_this_host_cannot_run_are_refused_before_queueing(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    with pytest.raises(ConfigError) as err:
        validate_run(
            _cfg(tiny_model("flux"), compile="on", num_gpus=2, batch_size=2),
            settings,
            live_output_names=set(),
        )
    fields = _fields(err)
    assert "CUDA" in fields["compile"]  # this CPU-only test host
    assert "torchrun" in fields["num_gpus"]
    with pytest.raises(ConfigError) as err:
        validate_run(
            _cfg(tiny_model("sdxl"), family="sdxl", compile="wide"), settings, live_output_names=set()
        )
    assert "'wide' needs a CUDA GPU" in _fields(err)["compile"]


def test_host_refusals_come_with_the_configs_other_problems(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    raw = _cfg(tiny_model("flux"), lora_rank=0, bogus=1, optimizer="lion8bit", compile="on")
    raw["attention_backend"] = "cudnn"
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    fields = [p.field for p in err.value.problems]
    assert {"lora_rank", "bogus", "optimizer", "compile", "attention_backend"} <= set(fields)
    assert len(fields) == len(set(fields))  # each problem once
    assert "8-bit CUDA kernels" in _fields(err)["optimizer"]  # this CPU-only test host
    assert "needs a CUDA GPU" in _fields(err)["compile"]
    assert "CUDA kernel" in _fields(err)["attention_backend"]
    # a value the schema refuses is reported by the schema alone
    with pytest.raises(ConfigError) as err:
        validate_run(
            _cfg(tiny_model("flux"), bogus=1, optimizer="lion9bit"), settings, live_output_names=set()
        )
    assert [p.field for p in err.value.problems].count("optimizer") == 1


def test_base_precisions_follow_what_this_host_runs(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    from lorastudio.jobs.hardware import host_info, precisions_for

    host = host_info()  # this CPU-only test host
    assert host.gpu_count == 0 and host.public()["gpu_count"] == 0
    assert host.precisions == ("auto", "fp32", "bf16", "int8", "nf4")  # int8 / nf4 run on the CPU
    assert "fp8" in precisions_for("cuda", (9, 0)) and "fp8" in precisions_for("cuda", (8, 9))
    assert "fp8" not in precisions_for("cuda", (8, 6)) and "nf4" in precisions_for("cuda", (8, 6))
    assert not {"bf16", "int8", "nf4", "fp8"} & set(precisions_for("cuda", (7, 5)))

    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(tiny_model("flux"), base_precision="fp8"), settings, live_output_names=set())
    assert "fp8 is not available on this host (cpu)" in _fields(err)["base_precision"]
    for precision in ("int8", "nf4"):
        run = validate_run(
            _cfg(tiny_model("flux"), base_precision=precision), settings, live_output_names=set()
        )
        assert run.config.base_precision == precision


def test_an_assistant_lora_is_refused_at_submission_unless_the_base_is_distilled(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    adapter = tmp_path / "adapter.safetensors"
    adapter.write_bytes(b"")  # its content is read by the worker; submission checks the base
    with pytest.raises(ConfigError) as err:  # the tiny FLUX.1 says nothing of being distilled
        validate_run(_cfg(tiny_model("flux"), assistant_lora=str(adapter)), settings, live_output_names=set())
    assert "cannot tell whether the base" in _fields(err)["assistant_lora"]
    schnell = settings.models_dir / "schnell"
    shutil.copytree(tiny_model("flux"), schnell)
    (schnell / "lorastudio_fetch.json").write_text(
        json.dumps({"repo_id": "black-forest-labs/FLUX.1-schnell"})
    )
    run = validate_run(_cfg(schnell, assistant_lora=str(adapter)), settings, live_output_names=set())
    assert run.config.assistant_lora == str(adapter)


MISSING_TRACKERS = [n for n in ("tensorboard", "wandb") if importlib.util.find_spec(n) is None]


@pytest.mark.skipif(not MISSING_TRACKERS, reason="every tracker package is installed here")
def test_a_resumes_host_refusals_come_with_its_refused_overrides(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """A resume whose overrides were refused (a setting that changes the maths) told the host's
    refusals (memory_budget_gb without CUDA, a missing tracker package) only in a second answer."""
    from lorastudio.jobs.resume import validate_resume
    from lorastudio.training.loop import train

    run = validate_run(
        _cfg(tiny_model("flux"), steps=3, save_every=2, output_name="r"), settings, live_output_names=set()
    )
    train(run.worker_config, lambda event: None, settings=settings, device="cpu")
    tracker = MISSING_TRACKERS[0]
    overrides = {"steps": 6, "learning_rate": 1.0, "memory_budget_gb": 8, "report_to": [tracker]}
    with pytest.raises(ConfigError) as err:
        validate_resume(settings.outputs_dir / "r", None, overrides, settings, live_output_names=set())
    fields = [p.field for p in err.value.problems]
    assert sorted(fields) == ["learning_rate", "memory_budget_gb", "report_to"], err.value.problems
    assert "changes the maths" in _fields(err)["learning_rate"]
    assert "measured on a CUDA GPU" in _fields(err)["memory_budget_gb"]
    assert f"needs the {tracker} package" in _fields(err)["report_to"]


def test_a_resume_with_a_link_at_losses_bin_is_refused_at_submission(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """RELIABILITY 1642: the job service accepted the resume of a run whose losses.bin is a link;
    its worker then trained up to the first checkpoint and failed there, on the append."""
    from lorastudio.jobs.resume import validate_resume
    from lorastudio.training.loop import train
    from lorastudio.training.resume.run_files import LOSSES_FILE

    run = validate_run(
        _cfg(tiny_model("flux"), steps=3, save_every=2, output_name="ln"), settings, live_output_names=set()
    )
    train(run.worker_config, lambda event: None, settings=settings, device="cpu")
    folder = settings.outputs_dir / "ln"
    real = folder.parent / "kept-losses.bin"
    (folder / LOSSES_FILE).rename(real)
    (folder / LOSSES_FILE).symlink_to(real)
    with pytest.raises(ConfigError) as err:
        validate_resume(folder, None, {"steps": 6}, settings, live_output_names=set())  # train longer
    assert "a symbolic link" in _fields(err)["resume"] and "then resume" in _fields(err)["resume"]


def test_an_entrys_scan_problem_names_its_own_datasets_field(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """RELIABILITY 1736: an entry of no images (or a corrupt one) among several was reported
    under `datasets`, not the entry's `datasets.N.path` its resolve problems use."""
    empty = settings.datasets_dir / "empty"
    empty.mkdir(parents=True)
    (empty / "notes.md").write_text("no images", encoding="utf-8")
    raw = _cfg(tiny_model("flux"), data_dir=None, datasets=[{"path": "shapes"}, {"path": "empty"}])
    with pytest.raises(ConfigError) as caught:
        validate_run(raw, settings, live_output_names=set())
    fields = _fields(caught)
    assert list(fields) == ["datasets.1.path"] and "no png/jpg/jpeg/webp files" in fields["datasets.1.path"]


def test_a_kohya_sub_folders_scan_problem_names_its_parents_datasets_field(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """RELIABILITY 1774: with kohya_folders the scanned entries are the sub-folders, and their
    scan problems came under `datasets`, not the parent entry's `datasets.N.path`."""
    import shutil

    first = settings.datasets_dir / "k0"
    for sub in ("10_ball", "3_cube"):
        shutil.copytree(shapes, first / sub)
    bare = settings.datasets_dir / "k1" / "5_sks dog"
    bare.mkdir(parents=True)
    (bare / "notes.md").write_text("no images", encoding="utf-8")
    raw = _cfg(
        tiny_model("flux"), data_dir=None, kohya_folders=True, datasets=[{"path": "k0"}, {"path": "k1"}]
    )
    with pytest.raises(ConfigError) as caught:
        validate_run(raw, settings, live_output_names=set())
    fields = _fields(caught)
    assert list(fields) == ["datasets.1.path"], fields
    assert (
        "no png/jpg/jpeg/webp files" in fields["datasets.1.path"] and "5_sks dog" in fields["datasets.1.path"]
    )
