"""A `~` that no shell expanded (`--out=~/x`, a quoted "~/my data") names the user's home in
every path argument and option of the CLI, as it does in a config file's paths (session 39 CLI
audit, RELIABILITY 1960): `tiny dataset --out=~/ds` wrote a folder literally named `~` in the
current folder, `train "~/run.toml"` and `config import` said not found."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest
import typer

from cli_runner import run_cli_streams
from lorastudio.cli.user_path_args import existing_folder, user_path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home under tmp_path, the current folder another one."""
    home = tmp_path / "home"
    (tmp_path / "cwd").mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path / "cwd")
    return home


def test_a_tilde_names_the_home_not_a_folder_here(capsys, monkeypatch, home: Path) -> None:
    code, out, err = run_cli_streams(capsys, monkeypatch, "tiny", "dataset", "--out=~/shapes")
    assert code == 0, (out, err)
    assert len(list((home / "shapes").glob("*.png"))) == 8
    assert list(Path.cwd().iterdir()) == []  # no folder named "~" here
    code, out, err = run_cli_streams(capsys, monkeypatch, "train", "~/run.toml", "--check")
    assert code == 2 and f"{home}/run.toml not found" in err, (out, err)
    code, out, err = run_cli_streams(capsys, monkeypatch, "config", "import", "~/job.yaml")
    assert code == 2 and f"cannot read {home}/job.yaml" in err, (out, err)
    code, out, err = run_cli_streams(capsys, monkeypatch, "datasets", "import", "~/shapes/shape_00.png")
    assert code == 2 and f"'{home}/shapes/shape_00.png' is not a folder" in err, (out, err)


def _commands(app: typer.Typer) -> typing.Iterator[typing.Callable[..., typing.Any]]:
    for info in app.registered_commands:
        yield info.callback
    for group in app.registered_groups:
        yield from _commands(group.typer_instance)


def test_every_path_parameter_expands_a_tilde() -> None:
    from lorastudio.cli.app import _register, app

    _register()
    checked = []
    for command in _commands(app):
        hints = typing.get_type_hints(command)
        for name, parameter in inspect.signature(command).parameters.items():
            if "Path" in str(hints.get(name)):
                assert parameter.default.callback in (user_path, existing_folder), (command.__name__, name)
                checked.append(name)
    assert len(checked) >= 15, checked


def test_models_add_takes_a_relative_path_from_the_current_folder(capsys, monkeypatch, tmp_path) -> None:
    """`models add ./mine` was refused "give an absolute folder path" (the API's rule: a server has
    no current folder of the user's), unlike every other path the CLI takes (RELIABILITY 1967)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    code, out, err = run_cli_streams(capsys, monkeypatch, "models", "add", "./mine")
    assert code == 0 and f"added {tmp_path}/mine as added:mine-" in out, (out, err)


def test_control_dirs_and_a_validation_folder_are_localized_like_data_dir(home: Path) -> None:
    """control_dirs and a validation_split folder are read "like data_dir", but a config's
    `~/controls` or `./val` stayed as typed: a dataset named "~/controls" under datasets/
    (session 39 newcode10, RELIABILITY 2014)."""
    from lorastudio.cli.config_file import localize_paths

    out = localize_paths(
        {"data_dir": "~/d", "control_dirs": ["~/c", "./c2", "pairs-controls"], "validation_split": "./val"}
    )
    assert out["data_dir"] == str(home / "d")
    assert out["control_dirs"] == [str(home / "c"), str(Path.cwd() / "c2"), "pairs-controls"]
    assert out["validation_split"] == str(Path.cwd() / "val")
    assert localize_paths({"validation_split": 0.1, "control_dirs": []}) == {
        "validation_split": 0.1,
        "control_dirs": [],
    }
