"""Attacks on the kohya import (`lorastudio datasets import --kohya [--reg]`) and on
`kohya_folders = true`: folder names with control / text-direction characters, names too long
for a dataset, a repeat count past a run's limit (an epoch of billions of samples), a reg
folder equal to the image folder. Each is skipped or refused with the reason; nothing the
studio refuses elsewhere (a dataset name, a config) is created."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from lorastudio.errors import ConfigError, DatasetError
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings

ODD = {
    "10_a\u202egnp.exe": "U+202E",  # a right-to-left override: the name reads backwards
    "10_ctl\x01x": "control",
    "10_del\x7fx": "control",  # DEL made the printed TOML unreadable
    "999999999_big": "at most 10000",
}


def _img(folder: Path) -> None:
    folder.mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(folder / "a.png")


def test_odd_kohya_folders_are_skipped_with_the_reason(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    src = tmp_path / "img"
    for name in [*ODD, "10_" + "a" * 120, "5_ok"]:
        _img(src / name)
    (src / "3_empty").mkdir()
    out = tmp_path / "entries.toml"
    args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--entries", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in settings.datasets_dir.iterdir() if not p.name.startswith(".")) == ["k-5_ok"]
    assert tomllib.loads(out.read_text())["datasets"] == [
        {"path": "k-5_ok", "repeats": 5, "trigger_word": "ok"}
    ]
    for why in ODD.values():
        assert why in result.output
    assert "must be at most 100 characters" in result.output  # k-10_aaa...: too long a dataset name
    assert "skipped 3_empty: no images to import in this folder" in result.output
    strict = CliRunner().invoke(cli, [*args[:-2], "--name", "k2", "--strict"])
    assert strict.exit_code != 0 and not (settings.datasets_dir / "k2-5_ok").exists()


def test_a_reg_folder_that_is_the_image_folder_is_refused(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    src = tmp_path / "img"
    _img(src / "5_ok")
    for reg in (src, src / "5_ok", tmp_path):
        args = ["datasets", "import", str(src), "--name", "r", "--kohya", "--reg", str(reg)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "--reg" in result.output, result.output
    assert not any(settings.datasets_dir.glob("r-*"))


@pytest.mark.parametrize("folder", ["999999999_big", "10_ctl\x01x"])
def test_kohya_folders_past_the_limits_refuse_the_run(settings: Settings, tiny_model, folder: str) -> None:
    _img(settings.datasets_dir / "kset" / folder)
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "data_dir": "kset"}
    with pytest.raises((ConfigError, DatasetError)) as err:
        validate_run({**raw, "kohya_folders": True}, settings, live_output_names=set())
    assert "kset/" in str(err.value) or "kset/" in str(getattr(err.value, "problems", ""))


def test_an_entries_file_that_cannot_be_written_is_refused_before_any_import(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """`--entries entries.toml` naming an existing file imported every folder, then failed (exit
    2, "already exists"), and the rerun with another file was refused: "dataset k-5_ok already
    exists". Now the file is checked first and nothing is imported."""
    src = tmp_path / "img"
    _img(src / "5_ok")
    taken = tmp_path / "entries.toml"
    taken.write_text("# mine\n")
    for entries, said in ((taken, "already exists"), (tmp_path / "no" / "e.toml", "is not a folder")):
        args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--entries", str(entries)]
        result = CliRunner().invoke(cli, args)
        # a DatasetError: `lorastudio` (cli/app.main) prints it and exits 2
        assert isinstance(result.exception, DatasetError) and said in str(result.exception), result.output
        assert not any(settings.datasets_dir.glob("k-*")), result.output
    assert taken.read_text() == "# mine\n"
    fresh = tmp_path / "e.toml"
    args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--entries", str(fresh)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and tomllib.loads(fresh.read_text())["datasets"][0]["path"] == "k-5_ok"


def test_a_taken_reg_dataset_name_is_refused_before_the_image_folders_import(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """`--kohya --name q --reg R` with `q-reg-1_dog` taken imported `q-5_ok` first, then was
    refused, and the rerun was refused for `q-5_ok`. Now every name is checked first."""
    src, reg = tmp_path / "img", tmp_path / "reg"
    _img(src / "5_ok")
    _img(reg / "1_dog")
    _img(settings.datasets_dir / "q-reg-1_dog")
    args = ["datasets", "import", str(src), "--name", "q", "--kohya", "--reg", str(reg)]
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, DatasetError) and "q-reg-1_dog already exists" in str(
        result.exception
    )
    assert not (settings.datasets_dir / "q-5_ok").exists(), result.output
