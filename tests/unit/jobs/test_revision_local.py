"""A revision given with a local folder or file is refused, naming `revision`, by every place that
takes one (one rule: config_fields_source.local_revision_problem, and the resolvers for what only
the disk tells): TrainConfig (with the other problems at once), generate, the caption options of
the API and the CLI, resolve_base and resolve_captioner. Before RELIABILITY 411 it was taken and
ignored. A run saved with such a revision (old code) still resumes, without it (it never
applied)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.basemodels import resolve_base
from lorastudio.captioning.source import resolve_captioner
from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings, get_settings


def _fields(err: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return {p.field: p.message for p in err.value.problems}


def test_train_config_refuses_it_with_every_other_problem() -> None:
    with pytest.raises(ConfigError) as err:
        parse_train_config(
            {
                "family": "flux",
                "base_model": "/models/mine",
                "data_dir": "d",
                "revision": "main",
                "lora_rank": 0,
            }
        )
    fields = _fields(err)
    assert set(fields) == {"revision", "lora_rank"}, fields
    assert "base_model '/models/mine' is a local folder or file" in fields["revision"]
    for local in ("tiny-flux", "~/m", "./m"):  # a name under models/, paths
        with pytest.raises(ConfigError, match="revision"):
            parse_train_config({"family": "flux", "base_model": local, "data_dir": "d", "revision": "v1"})
    # a hub id takes it; a single file's revision applies to its base config's hub id
    parse_train_config({"family": "flux", "base_model": "acme/flux", "data_dir": "d", "revision": "v1"})
    single = {"family": "flux", "base_model": "/m/flux.safetensors", "data_dir": "d", "revision": "v1"}
    parse_train_config(single)
    parse_train_config({**single, "base_config": "acme/flux"})
    with pytest.raises(ConfigError) as err:
        parse_train_config({**single, "base_config": "/m/flux-folder"})
    assert "base_config '/m/flux-folder' is a local folder" in _fields(err)["revision"]


def test_the_resolvers_refuse_an_owner_name_that_is_a_folder_under_models(studio_home: Path) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    (settings.models_dir / "acme" / "thing").mkdir(parents=True)  # looks like a hub id; a folder here
    with pytest.raises(ConfigError) as err:
        resolve_base("acme/thing", "flux", settings, "main")
    assert "base_model 'acme/thing' is a local folder" in _fields(err)["revision"]
    raw = {"family": "flux", "base_model": "acme/thing", "data_dir": "d", "revision": "main", "lora_rank": 0}
    with pytest.raises(ConfigError) as err:  # a run's request: with its other problems at once
        validate_run(raw, settings, live_output_names=set())
    assert {"revision", "lora_rank"} <= set(_fields(err)), _fields(err)
    with pytest.raises(ConfigError) as err:
        resolve_captioner(settings, "acme/thing", "main")
    assert "model 'acme/thing' is a local folder" in _fields(err)["revision"]
    with pytest.raises(ConfigError) as err:
        resolve_captioner(settings, str(settings.models_dir / "acme" / "thing"), "main")
    assert set(_fields(err)) == {"revision"}


def test_generate_refuses_it(tiny_model: Callable[[str], Path], studio_home: Path) -> None:
    service = GenerationService(Settings(home=studio_home), GpuArbiter())
    try:
        req = GenerationRequest(family="flux", base_model=str(tiny_model("flux")), prompt="x", width=64,
                                height=64, revision="main")  # fmt: skip
        with pytest.raises(ConfigError) as err:
            service.check(req)
        assert "is a local folder" in _fields(err)["revision"]
    finally:
        service.shutdown()


def test_caption_api_and_cli_refuse_it(tmp_path: Path) -> None:
    settings = get_settings().ensure_dirs()
    (settings.datasets_dir / "cards").mkdir()
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        answer = client.post("/api/datasets/cards/caption", json={"model": str(vlm), "revision": "main"})
    assert answer.status_code in (400, 422), answer.text
    assert "revision" in answer.text and "is a local folder" in answer.text
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    out = CliRunner().invoke(app, ["datasets", "caption", "cards", "--model", str(vlm), "--revision", "main"])
    assert isinstance(out.exception, ConfigError), out.output  # the CLI's entry prints it, exit 2
    assert [p.field for p in out.exception.problems] == ["revision"]
    assert "is a local folder" in out.exception.problems[0].message
    assert not list((settings.datasets_dir / "cards").iterdir())


def test_a_run_saved_with_a_revision_beside_its_folder_still_resumes(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    from lorastudio.jobs.resume import validate_resume
    from lorastudio.training.loop import train
    from lorastudio.training.resume.identity_base import base_record

    cfg = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32,
           "steps": 3, "save_every": 2, "output_name": "r"}  # fmt: skip
    run = validate_run(cfg, settings, live_output_names=set())
    train(run.worker_config, lambda event: None, settings=settings, device="cpu")
    # what the old code saved when given revision "main" with the folder (and ignored)
    info_file = sorted((settings.outputs_dir / "r" / "checkpoints").glob("step-*/identity.json"))[-1]
    info = json.loads(info_file.read_text(encoding="utf-8"))
    assert info["identity"]["revision"] is None
    info["config"]["revision"] = info["identity"]["revision"] = "main"
    # its base fingerprint (fingerprint rule 2: the components FLUX.1 lacks by the base's name and
    # revision) named it too
    with_it = run.config.model_copy(update={"revision": "main"})
    info["identity"].update(base_record(with_it, "transformer", rule=2))
    assert (
        info["identity"]["base_fingerprint"]
        != base_record(run.config, "transformer", rule=2)["base_fingerprint"]
    )
    info_file.write_text(json.dumps(info), encoding="utf-8")
    longer = {"steps": 5}  # train it longer: a resume of a finished run
    resume = validate_resume(settings.outputs_dir / "r", None, longer, settings, live_output_names=set())
    assert resume.config.revision is None and resume.total_steps == 5
    result = train(resume.worker_config, lambda event: None, settings=settings, device="cpu",
                   resume=settings.outputs_dir / "r")  # fmt: skip
    assert (result.steps_run, result.resumed_from, result.stopped) == (5, resume.step, False), result
