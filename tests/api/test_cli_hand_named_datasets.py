"""`lorastudio datasets list` marks a folder made by hand under a name the studio cannot use with
the reason and the fix, and `datasets rename` / `datasets delete` reach it by its listed name
(data/dataset_names.py): before, `list` showed it like any other and no command could fix it."""

from __future__ import annotations

import io
import unicodedata
from pathlib import Path

import pytest
from PIL import Image

from cli_runner import run_cli
from lorastudio.settings import Settings

NFD = unicodedata.normalize("NFD", "café")


def _dataset(folder: Path) -> Path:
    folder.mkdir(parents=True)
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(buf, format="PNG")
    (folder / "a.png").write_bytes(buf.getvalue())
    return folder


def test_cli_lists_renames_and_deletes_hand_named_folders(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    settings.ensure_dirs()
    _dataset(settings.datasets_dir / "what?")
    _dataset(settings.datasets_dir / NFD)
    _dataset(settings.datasets_dir / "good")
    code, out = run_cli(capsys, monkeypatch, "datasets", "list")
    assert code == 0, out
    assert (
        "unusable: 'what?': the studio cannot use this name (must not contain any of ?): rename the folder"
        in out
    )
    assert f"unusable: {NFD!r}: its name is in decomposed Unicode" in out
    assert "unusable: 'good'" not in out

    code, out = run_cli(capsys, monkeypatch, "datasets", "rename", "--", "what?", "bad?")
    assert code == 2 and "must not contain" in out, out
    code, out = run_cli(capsys, monkeypatch, "datasets", "rename", "--", "what?", "good")
    assert code == 2 and "already exists" in out, out
    code, out = run_cli(capsys, monkeypatch, "datasets", "rename", "--", "what?", "what")
    assert code == 0 and "renamed dataset 'what?' to 'what'" in out, out
    assert (settings.datasets_dir / "what" / "a.png").is_file()
    assert not (settings.datasets_dir / "what?").exists()

    code, out = run_cli(capsys, monkeypatch, "datasets", "delete", "--yes", NFD)
    assert code == 0, out
    assert not (settings.datasets_dir / NFD).exists()
    code, out = run_cli(capsys, monkeypatch, "datasets", "list")
    assert code == 0 and "unusable" not in out, out
