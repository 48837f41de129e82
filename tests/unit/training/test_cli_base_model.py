"""A `lorastudio train` run stores base_model in the canonical form the job service stores
(jobs/validation.with_resolved_base): a name under models/ or a relative folder becomes the
absolute resolved folder, in the run record and the checkpoint alike, so the runs list, resume
(from any directory), "train again" and the disk caches agree with the API's runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings, get_settings
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info


def _train(config: Path, *extra: str):
    _register()
    return CliRunner().invoke(app, ["train", str(config), "--device", "cpu", *extra])


def _recorded(output_name: str) -> list[str]:
    store = RunStore.open(get_settings().db_path)
    try:
        runs = [r["id"] for r in reversed(store.list_runs()) if r["output_name"] == output_name]
        return [store.get_run(run_id)["config"]["base_model"] for run_id in runs]
    finally:
        store.close()


def test_a_name_under_models_is_stored_as_the_api_stores_it(
    tiny_model, small_dataset, tmp_path, run_settings
):
    settings = get_settings()
    shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux")
    raw = run_settings("flux", Path("tiny-flux"), small_dataset, {"output_name": "named", "save_every": 1})
    config = tmp_path / "run.json"
    config.write_text(json.dumps(raw))
    result = _train(config)
    assert result.exit_code == 0, result.output
    api = validate_run(
        {**raw, "output_name": "other"},
        Settings(home=settings.home),
        live_output_names=set(),
        allow_outside_root=True,
    )
    canonical = str((settings.models_dir / "tiny-flux").resolve())
    assert api.config.base_model == api.worker_config.base_model == canonical  # the job service's form
    assert _recorded("named") == [canonical]
    checkpoint = find_checkpoint(settings.outputs_dir / "named")
    assert read_checkpoint_info(checkpoint)["config"]["base_model"] == canonical


def test_a_relative_folder_resumes_from_another_directory(
    tiny_model, small_dataset, tmp_path, run_settings, monkeypatch
):
    """A run started with ./models/tiny from one directory resumes (and trains longer) from
    another, with a --set data_dir relative to the new one: the checkpoint holds absolute paths,
    and the resume's --set paths are taken against the directory it runs in."""
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_model("flux"), first / "models" / "tiny")
    shutil.copytree(small_dataset, second / "moved-data")
    raw = run_settings("flux", Path("./models/tiny"), small_dataset, {"output_name": "rel", "save_every": 1})
    (first / "run.json").write_text(json.dumps(raw))
    monkeypatch.chdir(first)
    result = _train(first / "run.json")
    assert result.exit_code == 0, result.output
    canonical = str((first / "models" / "tiny").resolve())
    assert _recorded("rel") == [canonical]

    monkeypatch.chdir(second)
    run_dir = get_settings().outputs_dir / "rel"
    _register()
    resumed = CliRunner().invoke(
        app,
        [
            "train",
            "--resume",
            str(run_dir),
            "--device",
            "cpu",
            "--set",
            "steps=3",
            "--set",
            "data_dir=./moved-data",
        ],
    )
    assert resumed.exit_code == 0, resumed.output
    assert "resumed from step 1" in resumed.output and "done: 3 step(s)" in resumed.output
    assert _recorded("rel") == [canonical, canonical]
    info = read_checkpoint_info(find_checkpoint(run_dir))
    assert info["config"]["data_dir"] == str((second / "moved-data").resolve())


def test_a_fetched_hub_id_is_stored_as_its_folder_as_the_api_stores_it(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """A hub id that `lorastudio models fetch` put under models/ (its marker names the repo):
    both the CLI's record and the job service's config name that folder, not the id."""
    from lorastudio.basemodels.catalogue import FETCH_MARKER
    from lorastudio.basemodels.fetch import fetch_target

    settings = get_settings()
    folder = fetch_target(settings, "me/tiny-flux", None)
    shutil.copytree(tiny_model("flux"), folder)
    (folder / FETCH_MARKER).write_text(json.dumps({"repo_id": "me/tiny-flux", "revision": None}))
    raw = run_settings("flux", Path("me/tiny-flux"), small_dataset, {"output_name": "fetched"})
    raw["base_model"] = "me/tiny-flux"
    config = tmp_path / "run.json"
    config.write_text(json.dumps(raw))
    result = _train(config)
    assert result.exit_code == 0, result.output
    api = validate_run(
        {**raw, "output_name": "other"},
        Settings(home=settings.home),
        live_output_names=set(),
        allow_outside_root=True,
    )
    assert _recorded("fetched") == [api.config.base_model] == [str(folder.resolve())]
