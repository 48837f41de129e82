"""A run's files over HTTP: its resolved config as JSON and TOML (each one a config that parses
back to the same run), and the tail of its worker's own log; both go with the run's record."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

from api_helpers import FINAL, LiveServer, upload_folder, wait_idle, wait_status

from lorastudio.api.routes.run_files import config_toml
from lorastudio.config import parse_train_config, resolve_train_config
from lorastudio.config_fields_training import LEFT_OUT_AT_DEFAULT, LEFT_OUT_WHEN_NULL
from lorastudio.jobs.worker_log import read_tail


def test_config_download_and_worker_log(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post(
        "/api/train/start", json={"config": flux_config(output_name="files", max_grad_norm=None)}
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    assert wait_status(client, run_id, FINAL)["status"] == "completed"
    wait_idle(client)
    stored = client.get(f"/api/runs/{run_id}").json()
    assert stored["source"] == "service"

    as_json = client.get(f"/api/runs/{run_id}/config", params={"format": "json"})
    assert as_json.status_code == 200 and as_json.headers["content-type"].startswith("application/json")
    assert as_json.headers["content-disposition"] == 'attachment; filename="files.json"'
    again = resolve_train_config(parse_train_config(as_json.json()))
    # the API answers every setting; the file leaves a null init_lora and a validation_seed of 0
    # out (fixes 1330, 1681: an older version refuses the key it does not know)
    answered = {
        k: v
        for k, v in stored["config"].items()
        if not (k in LEFT_OUT_WHEN_NULL and v is None) and not (k in LEFT_OUT_AT_DEFAULT and v == 0)
    }
    assert not {"init_lora", "validation_seed"} & set(as_json.json())
    assert again.model_dump(mode="json") == answered

    as_toml = client.get(f"/api/runs/{run_id}/config", params={"format": "toml", "download": False})
    assert as_toml.status_code == 200 and "content-disposition" not in as_toml.headers
    assert as_toml.text.startswith("# off in this run (null), which TOML cannot write: max_grad_norm")
    from_toml = resolve_train_config(parse_train_config(tomllib.loads(as_toml.text)))
    expected = {**answered, "max_grad_norm": 1.0}  # TOML has no null: the default comes back
    assert from_toml.model_dump(mode="json") == expected
    assert client.get(f"/api/runs/{run_id}/config", params={"format": "yaml"}).status_code == 422

    log = client.get(f"/api/runs/{run_id}/log").json()
    text = "\n".join(log["lines"])
    assert log["size_bytes"] > 0 and log["note"] is None and not log["truncated"]
    assert "lorastudio.worker: model_load_started:" in text and "lorastudio.worker: complete:" in text
    last = client.get(f"/api/runs/{run_id}/log", params={"lines": 1}).json()
    assert len(last["lines"]) == 1 and last["truncated"] and last["lines"][0] == log["lines"][-1]
    assert client.get(f"/api/runs/{run_id}/log", params={"lines": 0}).status_code == 422
    assert client.get("/api/runs/nope/log").status_code == 404
    assert client.get("/api/runs/nope/config").status_code == 404

    home = Path(client.get("/api/info").json()["outputs_root"]).parent
    assert (home / "logs" / f"{run_id}.log").is_file()
    (home / "logs" / f"{run_id}.log.1").write_text("an earlier part\n")  # as a rotated log has (worker_log)
    assert client.get(f"/api/runs/{run_id}/log").json()["lines"][0] == "an earlier part"
    assert client.delete(f"/api/runs/{run_id}").status_code == 200
    assert not (home / "logs" / f"{run_id}.log").exists() and not (home / "logs" / f"{run_id}.log.1").exists()


def test_config_toml_keeps_lists_and_mappings() -> None:
    text = config_toml(
        {"family": "flux", "sample_prompts": ["a", "b"], "rank_pattern": {"to_k": 8}, "trigger_word": None}
    )
    assert tomllib.loads(text) == {
        "family": "flux",
        "sample_prompts": ["a", "b"],
        "rank_pattern": {"to_k": 8},
    }
    assert not text.startswith("#")  # trigger_word defaults to null: nothing lost


def test_config_toml_of_datasets_entries_reads_back_as_the_same_config() -> None:
    """A datasets entry's unset settings (null: the run's own) are left out of its table."""
    from lorastudio.config import TrainConfig

    cfg = TrainConfig.model_validate(
        {
            "family": "flux",
            "base_model": "x",
            "datasets": [{"path": "/a", "repeats": 2}, {"path": "/b", "loss_weight": 0.5}],
            "resolution": [512, 768],
        }
    )
    back = tomllib.loads(config_toml(cfg.model_dump(mode="json")))
    assert back["datasets"][1] == {  # null settings left out; booleans kept as they are
        "path": "/b",
        "loss_weight": 0.5,
        "regularisation": False,
        "prior_prediction": False,
    }
    assert TrainConfig.model_validate(back) == cfg


def test_log_tail_is_bounded_and_shows_what_a_terminal_shows(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    assert read_tail(path, 10).lines == [] and read_tail(path, 10).size_bytes == 0
    path.write_bytes(
        b"first\r\nloading 10%\rloading 100%\r\n" + b"".join(b"line %d\n" % i for i in range(100))
    )
    tail = read_tail(path, 200)
    assert tail.lines[:2] == ["first", "loading 100%"] and tail.lines[-1] == "line 99" and not tail.truncated
    small = read_tail(path, 200, max_bytes=30)  # reads only the end; the cut first line is dropped
    assert (
        small.truncated and small.lines[-1] == "line 99" and all(x.startswith("line ") for x in small.lines)
    )
    assert json.dumps(small.lines)  # plain strings
