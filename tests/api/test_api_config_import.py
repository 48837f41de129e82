"""POST /api/config/import: another trainer's config sent as text, answered as Train form settings
with the report; nothing on the server's disk read for it (in process, no torch)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from lorastudio.config import parse_train_config, resolve_train_config

DATA = Path(__file__).resolve().parents[1] / "data" / "peer_configs"


def test_an_ai_toolkit_job_becomes_form_settings_with_its_report(client: TestClient) -> None:
    text = (DATA / "ai-toolkit_flux.yaml").read_text(encoding="utf-8")
    answer = client.post("/api/config/import", json={"name": "job.yaml", "text": text})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["trainer"] == "ai-toolkit"
    resolve_train_config(parse_train_config(body["config"]))  # the strict config takes it as it is
    assert body["config"]["datasets"] == [
        {"path": "/data/images/person", "caption_dropout": 0.05, "shuffle_tags": False}
    ]
    lines = {line["peer"]: line for line in body["report"]}
    assert lines["config.process[0].train.lr"] == {
        "peer": "config.process[0].train.lr", "outcome": "carried", "ours": "learning_rate", "value": 0.0001, "note": "",
    }  # fmt: skip
    assert body["toml"].startswith("# lorastudio run config imported from job.yaml (ai-toolkit)")


def test_the_files_it_names_and_its_relative_paths_are_not_read_on_the_server(client: TestClient) -> None:
    """kohya's dataset_config names a file: the web import reads the one it is sent (a server
    path a config names is never opened), so the settings come without a dataset (the form chooses
    it) and the report says why; a relative folder is not placed either."""
    text = (
        (DATA / "kohya_flux.toml")
        .read_text(encoding="utf-8")
        .replace('dataset_config = "kohya_dataset.toml"', 'dataset_config = "/etc/shadow.toml"')
    )
    answer = client.post("/api/config/import", json={"name": "flux.toml", "text": text, "trainer": "kohya"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "datasets" not in body["config"] and "data_dir" not in body["config"]
    lines = {line["peer"]: line for line in body["report"]}
    assert (
        lines["dataset_config"]["outcome"] == "not carried"
        and "web import" in lines["dataset_config"]["note"]
    )
    assert "web import" in lines["sample_prompts"]["note"]
    relative = client.post("/api/config/import", json={"name": "k.json", "text":
        '{"network_module": "networks.lora_flux", "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",'
        ' "train_data_dir": "img"}'})  # fmt: skip
    assert relative.status_code == 200, relative.text
    assert "datasets" not in relative.json()["config"]
    assert (
        "relative path 'img'"
        in {ln["peer"]: ln for ln in relative.json()["report"]}["train_data_dir"]["note"]
    )


def test_refusals_name_the_file_and_key(client: TestClient) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)
    )
    for name, text, said in (
        ("bomb.yaml", bomb, "alias bomb"),
        ("x.ini", "a = 1", "a .yaml, .yml, .toml or .json file"),
        ("job.yaml", "config:\n  process:\n    - datasets:\n        - folder_path: ../../etc\n", "'..' part"),
        ("two.json", '{"network_dim": 4, "model_family": "flux"}', "could be"),
    ):
        body = json.dumps({"name": name, "text": text})  # ASCII: a lone surrogate as its JSON escape
        answer = client.post("/api/config/import", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 400, (name, answer.text)
        assert answer.json()["error"] == "ConfigError" and said in answer.text, (name, answer.text)
    surrogate = json.dumps(
        {"name": "s.json", "text": '{"a": "\ud800"}'}
    )  # a lone surrogate, as JSON escapes it
    answer = client.post(
        "/api/config/import", content=surrogate, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 422 and "unicode" in answer.text  # refused before the route (never a 500)


def test_a_kohya_configs_run_settings_carry_without_its_folders(client: TestClient) -> None:
    """Session 38 journey (RELIABILITY 1784): kohya's flat `resolution = "512,512"` and bucket and
    caption arguments are the run's settings; the web import, which reads no folder, dropped every
    one as "no image folder carried", so the Train form kept its 1024 px for a 512 px config."""
    text = json.dumps({
        "network_module": "networks.lora_flux", "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",
        "train_data_dir": "img", "resolution": "512,512", "enable_bucket": True, "caption_dropout_rate": 0.1,
        "num_repeats": 3,
    })  # fmt: skip
    answer = client.post("/api/config/import", json={"name": "k.json", "text": text})
    assert answer.status_code == 200, answer.text
    config, lines = answer.json()["config"], {ln["peer"]: ln for ln in answer.json()["report"]}
    assert "datasets" not in config  # the folder is the user's to pick
    assert (config["resolution"], config["aspect_buckets"], config["caption_dropout"]) == (512, True, 0.1)
    assert lines["resolution"]["outcome"] == "carried"
    assert lines["num_repeats"] == {
        "peer": "num_repeats", "outcome": "not carried", "ours": None, "value": None,
        "note": "not needed here: no image folder carried",
    }  # fmt: skip
    resolve_train_config(parse_train_config({**config, "data_dir": "my-set"}))


def test_a_file_name_with_control_characters_is_shown_escaped(client: TestClient) -> None:
    """A name holding ESC, CR or DEL (the API's `name`; the CLI's file on disk goes the same way)
    was tomlkit's ValueError writing the TOML's first comment: a 500 (RELIABILITY 2236)."""
    import tomllib

    text = 'pretrained_model_name_or_path = "me/model"\n'
    for name, shown in (
        ("x\x1by.toml", "x\\x1by.toml"),
        ("a\r.toml", "a\\r.toml"),
        ("z\x7f\n.toml", "z\\x7f\\n.toml"),
    ):
        answer = client.post(
            "/api/config/import", json={"name": name, "text": text, "trainer": "kohya", "family": "flux"}
        )
        assert answer.status_code == 200, answer.text
        toml = answer.json()["toml"]
        assert toml.startswith(f"# lorastudio run config imported from {shown} (kohya)\n"), toml
        assert tomllib.loads(toml)["base_model"] == "me/model"
