"""A `lorastudio train` run is recorded in the run store like a server's run (marked as a CLI
run) and listed by the API; a failed run records its error; a store that cannot be written
never stops the training."""

from __future__ import annotations

import json
import sqlite3

from typer.testing import CliRunner

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.cli.app import _register, app
from lorastudio.config import parse_train_config
from lorastudio.jobs.cli_record import open_cli_record
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings, get_settings
from lorastudio.training.events import Error as ErrorEvent
from lorastudio.training.events import Progress


def _train(tmp_path, settings: dict, *extra: str):
    _register()
    config = tmp_path / "run.json"
    config.write_text(json.dumps(settings))
    return CliRunner().invoke(app, ["train", str(config), "--device", "cpu", *extra])


def test_a_cli_run_is_listed_under_runs(tiny_model, small_dataset, tmp_path, run_settings):
    from fastapi.testclient import TestClient

    settings = run_settings(
        "flux", tiny_model("flux"), small_dataset, {"steps": 3, "output_name": "from-cli"}
    )
    result = _train(tmp_path, settings)
    assert result.exit_code == 0, result.output
    with TestClient(create_app(Settings(home=get_settings().home)), base_url=LOOPBACK) as client:
        runs = client.get("/api/runs").json()["runs"]
        assert [(r["output_name"], r["source"], r["status"]) for r in runs] == [
            ("from-cli", "cli", "completed")
        ]
        run = client.get(f"/api/runs/{runs[0]['id']}").json()
        assert [p["step"] for p in run["metrics"]] == [1, 2, 3] and run["steps_run"] == 3
        assert run["started_at"] and run["finished_at"] and run["plan"] is not None
        assert run["config"]["lora_rank"] > 0 and run["config"]["output_name"] == "from-cli"  # resolved
        kinds = {o["kind"]: o["path"] for o in run["outputs"]}
        assert kinds["lora"].endswith("from-cli/from-cli.safetensors") and kinds["sidecar"].endswith(".json")
        log = client.get(f"/api/runs/{run['id']}/log").json()
        assert log["lines"] == [] and "terminal" in log["note"]
    shown = CliRunner().invoke(app, ["runs", "show", runs[0]["id"]])
    assert shown.exit_code == 0 and "source       cli" in shown.output


def test_an_epoch_cli_run_records_the_steps_it_trains_not_the_ignored_steps_setting(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """num_epochs overrides `steps` (1000 by default): the run store's total is the run's own
    length (its progress events'), so `runs list`, the API and the UI show 4/4, not 4/1000."""
    over = {"num_epochs": 2, "output_name": "by-epochs"}  # 4 images, batch 2, 2 buckets: 2 steps an epoch
    result = _train(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, over))
    assert result.exit_code == 0, result.output
    (run,) = RunStore.open(get_settings().db_path).list_runs()
    assert run["steps_run"] == run["total_steps"] == 4 and run["status"] == "completed", run
    listed = CliRunner().invoke(app, ["runs", "list"]).output
    assert "4/4" in listed and "/1000" not in listed, listed


def test_a_cli_run_stores_its_validation_rounds(tiny_model, small_dataset, tmp_path, run_settings):
    """The validation loss of a CLI run is in the run store like a server run's (the chart of
    `runs show` and of the UI's run page reads it)."""
    from fastapi.testclient import TestClient

    over = {"steps": 4, "output_name": "validated", "validation_split": 0.34, "validate_every": 2}
    result = _train(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, over))
    assert result.exit_code == 0, result.output
    with TestClient(create_app(Settings(home=get_settings().home)), base_url=LOOPBACK) as client:
        (listed,) = client.get("/api/runs").json()["runs"]
        run = client.get(f"/api/runs/{listed['id']}").json()
    rounds = run["validation"]
    assert [r["step"] for r in rounds] == [2, 4], rounds
    assert all(isinstance(r["loss"], float) and r["loss"] > 0 for r in rounds)
    shown = CliRunner().invoke(app, ["runs", "show", listed["id"]]).output
    lines = [line for line in shown.splitlines() if line.startswith("validation ")]
    assert [line.split()[2] for line in lines] == ["2:", "4:"] and sum("(best)" in x for x in lines) == 1, (
        shown
    )


def test_a_failed_cli_run_records_its_error(tiny_model, small_dataset):
    """The engine's error (or one it did not report) ends the record as failed, with the metric
    points it had (non-finite numbers stored as null, as the job service stores them)."""
    config = parse_train_config(
        {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(small_dataset), "steps": 5}
    )
    record = open_cli_record(config.model_copy(update={"output_name": "broken"}))
    assert record is not None
    step = {"total_steps": 5, "epoch": 0, "lr": 1e-4, "samples_per_second": None, "peak_memory_gb": 1.0}
    record.emit(Progress(step=1, loss=0.5, avg_loss=0.5, grad_norm=float("nan"), **step))
    record.emit(ErrorEvent(message="the loss was not finite for 3 steps"))
    record.fail("ignored: the run is already final")
    record.close()
    run = RunStore.open(get_settings().db_path, recover=False).get_run(record.run_id)
    assert (run["source"], run["status"], run["error"]) == (
        "cli",
        "failed",
        "the loss was not finite for 3 steps",
    )
    assert run["metrics"][0]["step"] == 1 and run["metrics"][0]["grad_norm"] is None
    assert run["started_at"] and run["finished_at"] and run["config"]["lora_rank"] > 0


def test_an_unwritable_store_does_not_stop_the_run(tiny_model, small_dataset, tmp_path, run_settings):
    db = get_settings().db_path
    db.parent.mkdir(parents=True, exist_ok=True)
    store = RunStore.open(db)
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'refused'); END")
    conn.commit()
    conn.close()
    settings = run_settings(
        "flux", tiny_model("flux"), small_dataset, {"steps": 2, "output_name": "unrecorded"}
    )
    result = _train(tmp_path, settings)
    assert result.exit_code == 0, result.output
    assert "no longer recorded in the run store" in result.output
    assert (get_settings().outputs_dir / "unrecorded" / "unrecorded.safetensors").is_file()


def test_a_resumed_cli_run_carries_the_history_it_continues(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """`train --resume` records a new run, which starts with the metric points and validation
    rounds of the run it continues up to the checkpoint (as a server resume does), so its chart,
    `runs show` and validation.json tell the same series."""
    over = {"steps": 4, "save_every": 2, "output_name": "cont", "validation_split": 0.34, "validate_every": 1}
    assert _train(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, over)).exit_code == 0
    run_dir = get_settings().outputs_dir / "cont"
    resumed = CliRunner().invoke(
        app, ["train", "--resume", str(run_dir), "--set", "steps=6", "--device", "cpu"]
    )
    assert resumed.exit_code == 0, resumed.output
    store = RunStore.open(get_settings().db_path)
    newest = store.get_run(store.list_runs()[0]["id"])
    assert [p["step"] for p in newest["metrics"]] == [1, 2, 3, 4, 5, 6]  # 1-2 carried, 3-6 trained again
    first = store.get_run(store.list_runs()[1]["id"])
    assert newest["metrics"][:2] == first["metrics"][:2]
    assert [v["step"] for v in newest["validation"]] == [1, 2, 3, 4, 5, 6]
    on_disk = json.loads((run_dir / "validation.json").read_text())["series"]
    assert [(v["step"], v["loss"]) for v in newest["validation"]] == [(v["step"], v["loss"]) for v in on_disk]


def test_a_failed_final_sample_round_completes_the_cli_run_with_a_warning(
    tiny_model, small_dataset, tmp_path, run_settings, monkeypatch
):
    """The final sample round fails after the LoRA was written: `lorastudio train` exits 0 saying
    the run is done with a warning (the failure named), the record is completed with the warning
    (`runs show` prints it) and lists the LoRA (was: exit 1, the record failed)."""
    from lorastudio.training.samples import SamplePreviews

    real = SamplePreviews.render

    def render(self, denoiser, step, vae=None):
        if step >= 2:
            raise RuntimeError("the final sampler broke")
        return real(self, denoiser, step, vae=vae)

    monkeypatch.setattr(SamplePreviews, "render", render)
    over = {"steps": 2, "output_name": "warned", "sample_prompts": ["a red circle"], "sample_steps": 2}
    result = _train(tmp_path, run_settings("flux", tiny_model("flux"), small_dataset, over))
    assert result.exit_code == 0, result.output
    assert "done: 2 step(s), 1 warning(s)" in result.output and "the final sampler broke" in result.output
    (run,) = RunStore.open(get_settings().db_path).list_runs()
    assert (run["status"], run["error"]) == ("completed", None)
    [warning] = run["warnings"]
    assert "final sample round (step 2) failed" in warning and "the final sampler broke" in warning
    detail = RunStore.open(get_settings().db_path).get_run(run["id"])
    assert any(o["kind"] == "lora" and o["path"].endswith("warned.safetensors") for o in detail["outputs"])
    shown = CliRunner().invoke(app, ["runs", "show", run["id"]]).output
    assert f"warning      {warning}" in shown, shown


def test_a_run_cut_short_inside_the_engine_is_recorded_interrupted(tiny_model, small_dataset):
    """A second Ctrl-C inside train() reaches the command after the engine's Error event of it
    ("training interrupted") had marked the record failed; the command's abort now records what
    happened: interrupted, with its reason (session 25 CLI audit). A record that completed stays."""
    config = parse_train_config(
        {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(small_dataset), "steps": 5}
    )
    store_of = lambda: RunStore.open(get_settings().db_path, recover=False)  # noqa: E731
    record = open_cli_record(config.model_copy(update={"output_name": "cut"}))
    assert record is not None
    record.emit(ErrorEvent(message="training interrupted"))
    record.abort("aborted by a second Ctrl-C or SIGTERM")
    record.close()
    run = store_of().get_run(record.run_id)
    assert (run["status"], run["error"]) == ("interrupted", "aborted by a second Ctrl-C or SIGTERM")
    done = open_cli_record(config.model_copy(update={"output_name": "done"}))
    assert done is not None
    done.end(stopped=False, steps_run=5, lora_path=None)
    done.abort("interrupted by Ctrl-C")
    done.close()
    assert store_of().get_run(done.run_id)["status"] == "completed"


def test_a_cli_runs_record_keeps_its_dataset_warnings(tiny_model, sample_dataset, tmp_path, run_settings):
    """The warnings the run said about its dataset (its DatasetWarnings event) are in its record
    as `dataset_warnings` (RELIABILITY 847), not among its `warnings` (nothing failed)."""
    over = {"steps": 1, "resolution": 32, "output_name": "warned-cli"}
    result = _train(tmp_path, run_settings("flux", tiny_model("flux"), sample_dataset, over))
    assert result.exit_code == 0, result.output
    store = RunStore.open(get_settings().db_path, recover=False)
    try:
        run = store.get_run(store.list_runs()[0]["id"])
    finally:
        store.close()
    (cut,) = [w for w in run["dataset_warnings"] if "to the crop of their bucket" in w]
    assert "shape_06.png (33% cut), shape_07.png (33% cut)" in cut
    assert run["warnings"] == []
