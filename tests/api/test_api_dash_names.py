"""A name the user chooses for something the studio creates must not start with "-"
(data/paths.py new_name): a dataset named `-x` was accepted by the upload and the CLI import, and
then every command that takes a dataset name read it as an option (`datasets delete -x`: "No
such option"). New names are refused, saying why, by the API and the CLI alike; a folder named so
before (or by hand) stays reachable: by the API by its name, on the command line after `--`.
Output names (runs, LoRAs) were already held to a leading letter or digit."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from cli_runner import run_cli
from lorastudio.config import parse_train_config
from lorastudio.data import new_name, safe_component
from lorastudio.errors import ConfigError
from lorastudio.settings import Settings

REASON = "must not start with '-': a command line would read it as an option; pick another name"


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(buf, format="PNG")
    return buf.getvalue()


def _folder_with_an_image(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(_png())
    return folder


def test_new_name_refuses_a_leading_dash_that_safe_component_allows() -> None:
    for name in ("-x", "--x", "-", "--"):
        with pytest.raises(ConfigError) as info:
            new_name(name, field="dataset name")
        assert [p.field for p in info.value.problems] == ["dataset name"]
        assert REASON in info.value.problems[0].message
        assert safe_component(name) == name  # an existing one is still looked up by its name
    assert new_name("x-1") == "x-1"
    assert new_name("a--b") == "a--b"


def test_the_upload_refuses_a_new_dataset_named_with_a_leading_dash(
    client: TestClient, settings: Settings
) -> None:
    resp = client.post("/api/datasets/-x/files", files=[("files", ("a.png", _png()))])
    assert resp.status_code == 400, resp.text
    assert resp.json()["problems"] == [{"field": "dataset name", "message": f"'-x' {REASON}"}]
    assert not (settings.datasets_dir / "-x").exists()
    assert not (settings.datasets_dir / ".uploads").exists()  # refused before anything was staged
    assert client.post("/api/datasets/x-/files", files=[("files", ("a.png", _png()))]).status_code == 201


def test_a_dataset_named_with_a_leading_dash_before_stays_reachable_by_the_api(
    client: TestClient, settings: Settings
) -> None:
    settings.ensure_dirs()
    _folder_with_an_image(settings.datasets_dir / "-old")
    assert "-old" in [d["name"] for d in client.get("/api/datasets").json()["datasets"]]
    assert client.get("/api/datasets/-old").status_code == 200
    more = client.post("/api/datasets/-old/files", files=[("files", ("b.png", _png()))])
    assert more.status_code == 201, more.text  # adding to it creates nothing new
    put = client.put("/api/datasets/-old/captions/a.png", json={"caption": "kept"})
    assert put.status_code == 200, put.text
    assert client.delete("/api/datasets/-old").status_code == 200
    assert not (settings.datasets_dir / "-old").exists()


def test_the_cli_import_refuses_a_new_dash_name_and_reaches_an_old_one_after_double_dash(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, settings: Settings, tmp_path: Path
) -> None:
    src = _folder_with_an_image(tmp_path / "src")
    code, out = run_cli(capsys, monkeypatch, "datasets", "import", str(src), "--name", "-x")
    assert code == 2, out
    assert f"--name: '-x' {REASON}" in out
    dashed_src = _folder_with_an_image(tmp_path / "-y")  # the name taken from the folder
    code, out = run_cli(capsys, monkeypatch, "datasets", "import", "--", str(dashed_src))
    assert code == 2, out
    assert "--name (the folder's name when not given): '-y' must not start with '-'" in out
    code, out = run_cli(capsys, monkeypatch, "datasets", "import", str(src), "--name", "-k", "--kohya")
    assert code == 2, out
    assert f"'-k' {REASON}" in out
    settings.ensure_dirs()
    assert sorted(p.name for p in settings.datasets_dir.iterdir() if not p.name.startswith(".")) == []

    old = _folder_with_an_image(settings.datasets_dir / "-old")
    (old / "a.txt").write_text("a cat")
    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "--yes", "-old")
    assert code == 2 and "No such option" in out  # what the rule is for
    code, out = run_cli(capsys, monkeypatch, "datasets", "import", str(src), "--name", "-old")
    assert code == 0, out  # into the dataset that exists: nothing new is named
    code, out = run_cli(capsys, monkeypatch, "datasets", "captions", "--append", ", photo", "--", "-old")
    assert code == 0, out
    assert (old / "a.txt").read_text().strip() == "a cat, photo"
    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "--yes", "--", "-old")
    assert code == 0, out
    assert not old.exists()


def test_an_output_name_with_a_leading_dash_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigError) as info:
        parse_train_config({"family": "flux", "base_model": "m", "data_dir": "d", "output_name": "-x"})
    assert "output_name" in [p.field for p in info.value.problems]
