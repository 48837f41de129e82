"""The deleting commands' question when --yes is not given (cli/confirm.py), through the console
entry point in this process: no answer (a script's empty stdin) names --yes and exits 2, "no"
leaves everything and exits 1, "y" deletes; a dataset that does not exist is refused before the
question (was: asked, then "Aborted!" with status 1 for each)."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest

from cli_runner import run_cli
from lorastudio.settings import get_settings


@pytest.fixture
def dataset(sample_dataset: Path) -> Path:
    return Path(shutil.copytree(sample_dataset, get_settings().ensure_dirs().datasets_dir / "shapes"))


def _answer(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def test_no_answer_names_yes_and_a_no_keeps_the_dataset(capsys, monkeypatch, dataset: Path) -> None:
    _answer(monkeypatch, "")
    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "shapes")
    assert code == 2 and "no answer (end of input)" in out and "pass --yes" in out, out
    assert "Aborted" not in out and dataset.is_dir()
    _answer(monkeypatch, "n\n")
    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "shapes")
    assert code == 1 and "dataset shapes not deleted" in out and dataset.is_dir(), out
    _answer(monkeypatch, "y\n")
    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "shapes")
    assert code == 0 and "deleted dataset shapes" in out and not dataset.exists(), out


def test_a_missing_dataset_is_refused_before_the_question(capsys, monkeypatch, dataset: Path) -> None:
    _answer(monkeypatch, "")
    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "nope")
    assert code == 2 and "no dataset named 'nope'" in out and "[y/N]" not in out, out


def test_cache_clear_without_an_answer_names_yes(capsys, monkeypatch) -> None:
    _answer(monkeypatch, "")
    code, out = run_cli(capsys, monkeypatch, "cache", "clear")
    assert code == 2 and "pass --yes" in out and "Aborted" not in out, out


def test_a_delete_whose_files_stay_says_deleted_and_where_they_are(
    capsys, monkeypatch, dataset: Path
) -> None:
    """Session 28 surfaces audit (RELIABILITY 755): the folder moved aside, a file in it refused
    its removal (an immutable file): deleted, exit 0, and a warning naming the folder left."""
    import errno
    import os

    from lorastudio.data import dataset_delete

    def refused(path: object) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM), os.path.join(os.fsdecode(path), "a.png"))

    monkeypatch.setattr(dataset_delete.shutil, "rmtree", refused)
    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "shapes", "--yes")
    (trash,) = [p for p in dataset.parent.iterdir() if p.name.startswith(dataset_delete.TRASH_PREFIX)]
    assert code == 0 and "deleted dataset shapes" in out and not dataset.exists(), out
    assert (
        f"warning: some of its files could not be removed (Operation not permitted: {trash / 'a.png'}): they are in {trash}"
        in out
    )
