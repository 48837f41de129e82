"""`lorastudio tiny model` / `lorastudio tiny dataset`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import typer
from typer.testing import CliRunner

from lorastudio.cli import tiny_cmd
from lorastudio.tiny import read_marker


def _cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """Root (a group, like the real `lorastudio`)."""

    tiny_cmd.register(app)
    return app


def test_tiny_model_writes_a_loadable_folder(tmp_path):
    out = tmp_path / "flux"
    result = CliRunner().invoke(_cli(), ["tiny", "model", "--family", "flux", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    assert json.loads((out / "model_index.json").read_text())["_class_name"] == "FluxPipeline"
    assert read_marker(out) == {"family": "flux", "seed": 0, "format": 1}


def test_tiny_model_defaults_to_the_studio_models_folder(studio_home):
    result = CliRunner().invoke(_cli(), ["tiny", "model", "--family", "z-image"])
    assert result.exit_code == 0, result.output
    assert read_marker(studio_home / "models" / "tiny-z-image")["family"] == "z-image"


def test_tiny_dataset(tmp_path, studio_home):
    result = CliRunner().invoke(_cli(), ["tiny", "dataset", "--out", str(tmp_path / "shapes")])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "shapes").glob("*.txt"))) == 8
    result = CliRunner().invoke(_cli(), ["tiny", "dataset"])
    assert result.exit_code == 0, result.output
    assert len(list((studio_home / "datasets" / "tiny-shapes").glob("*.png"))) == 8


def test_bad_family_fails_clearly_and_writes_nothing(tmp_path):
    # through the real entry point: lorastudio.cli.app.main maps domain errors to exit code 2
    command = "import sys; from lorastudio.cli.app import main; sys.argv[0] = 'lorastudio'; main()"
    result = subprocess.run(
        [sys.executable, "-c", command, "tiny", "model", "--family", "sd15", "--out", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert result.returncode != 0
    assert "unknown model family 'sd15'" in result.stderr
    assert "sdxl, flux, qwen-image, z-image" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_tiny_model_prints_only_its_folder(tmp_path):
    """No library warnings, info lines or shard progress bars: the folder is the only output
    (issue 30)."""
    out = tmp_path / "sdxl"
    command = "import sys; from lorastudio.cli.app import main; sys.argv[0] = 'lorastudio'; main()"
    result = subprocess.run(
        [sys.executable, "-c", command, "tiny", "model", "--family", "sdxl", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{out}\n" and result.stderr == ""


def test_tiny_output_on_a_mount_point_says_so_and_where_to_write_instead(tmp_path, monkeypatch):
    # a disk mounted at the --out folder: its staging sibling cannot be renamed onto it (EBUSY)
    import errno

    import pytest

    from lorastudio.errors import DatasetError
    from lorastudio.tiny import make_sample_dataset

    mount = tmp_path / "mnt"
    mount.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: os.fspath(p) == os.fspath(mount) or real_ismount(p))
    result = CliRunner().invoke(_cli(), ["tiny", "model", "--family", "flux", "--out", str(mount)])
    assert result.exit_code != 0  # a ModelSourceError: the real CLI prints it as "error: ..."
    said = str(result.exception)
    assert f"{mount}: it is a mount point" in said and f"{mount / 'model'}" in said
    assert os.listdir(tmp_path) == ["mnt"]  # nothing staged beside it
    # a bind mount of a folder, which os.path.ismount does not see: the rename's EBUSY is named so
    monkeypatch.setattr(os.path, "ismount", real_ismount)

    def busy(path):  # an empty mount point cannot be removed to make way for the staged folder
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))

    monkeypatch.setattr(type(mount), "rmdir", busy)
    with pytest.raises(DatasetError, match="it is a mount point"):
        make_sample_dataset(mount)
    assert os.listdir(tmp_path) == ["mnt"]
