"""The server-side CLI: datasets list/import, runs list on an empty store, serve's bind check."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer
from typer.testing import CliRunner

from lorastudio.errors import ConfigError, DatasetError
from lorastudio.settings import Settings


def test_datasets_import_checks_everything_and_lists(
    cli: typer.Typer, settings: Settings, sample_dataset: Path, tmp_path: Path
) -> None:
    source = Path(shutil.copytree(sample_dataset, tmp_path / "mine"))
    (source / "notes.md").write_text("not part of the dataset")
    runner = CliRunner()
    result = runner.invoke(cli, ["datasets", "import", str(source), "--name", "portraits"])
    assert result.exit_code == 0, result.output
    assert "imported 16 file(s)" in result.output and "skipped notes.md" in result.output
    assert "8 image(s), 8 captioned" in result.output
    listed = runner.invoke(cli, ["datasets", "list"])
    assert "portraits" in listed.output and "8" in listed.output

    (source / "broken.png").write_bytes(b"garbage")
    bad = runner.invoke(cli, ["datasets", "import", str(source), "--name", "other", "--strict"])
    assert isinstance(bad.exception, DatasetError) and "broken.png" in str(bad.exception)
    assert not (settings.datasets_dir / "other").exists()
    kept = runner.invoke(cli, ["datasets", "import", str(source), "--name", "other"])
    assert kept.exit_code == 0, kept.output
    assert "imported 16 file(s)" in kept.output and "refused broken.png: " in kept.output
    assert not (settings.datasets_dir / "other" / "broken.png").exists()

    escape = runner.invoke(cli, ["datasets", "import", str(source), "--name", "../up"])
    assert escape.exit_code != 0 and not (settings.home / "up").exists()


def test_runs_list_on_an_empty_store(cli: typer.Typer, settings: Settings) -> None:
    result = CliRunner().invoke(cli, ["runs", "list"])
    assert result.exit_code == 0 and "no runs yet" in result.output


def test_serve_refuses_a_public_address_without_a_token(cli: typer.Typer, settings: Settings) -> None:
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--port", "1"])
    assert isinstance(result.exception, ConfigError) and "API token" in str(result.exception)
