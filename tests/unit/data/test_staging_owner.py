"""The owner lock of a staging folder under datasets/.uploads (data/staging_owner.py, RELIABILITY
591): held while its writer lives, never removed then, even by a remover that took a just-made
owner file before its writer locked it; unknown (left to a server start) where flock fails."""

from __future__ import annotations

import errno
import fcntl
from pathlib import Path

import pytest

from lorastudio.cli.kohya_import import _staging_folder
from lorastudio.data import staging_owner
from lorastudio.data.staging_owner import (
    Owner,
    make_owned,
    owner_file,
    owner_state,
    release,
    remove_stale_staging,
    stale_entries,
)


def test_a_live_writers_folder_is_held_and_a_released_one_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "datasets" / ".uploads"
    root.mkdir(parents=True)
    folder, fd = make_owned(root, "kohya-")
    assert folder.name.startswith("kohya-") and folder.is_dir() and fd is not None
    assert owner_state(folder) is Owner.HELD and owner_state(owner_file(folder)) is Owner.HELD
    assert remove_stale_staging(tmp_path / "datasets") == [] and folder.is_dir()
    folder.rmdir()
    release(folder, fd)
    assert list(root.iterdir()) == []


def test_a_remover_that_took_a_new_owner_file_first_never_removes_the_writers_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remover's try-lock comes between the writer's owner file and its lock: it removes that
    owner file (it was free) and the emptied staging root, and the writer, finding its owner file
    gone once it holds the lock, starts again under a new name, which it holds."""
    root = tmp_path / "datasets" / ".uploads"
    root.mkdir(parents=True)
    real, raced = fcntl.flock, []

    def flock(fd: int, op: int) -> None:
        if op == fcntl.LOCK_EX and not raced:  # the writer, about to lock its new owner file
            raced.append(remove_stale_staging(tmp_path / "datasets"))
        real(fd, op)

    monkeypatch.setattr(staging_owner.fcntl, "flock", flock)
    folder, fd = _staging_folder(tmp_path / "datasets")  # the kohya import's (its staging root made again)
    assert len(raced[0]) == 1 and raced[0][0].name.endswith(".owner")  # the first owner file went
    assert raced[0][0] != owner_file(folder)  # the folder has another name, held
    assert folder.is_dir() and owner_state(folder) is Owner.HELD
    monkeypatch.setattr(staging_owner.fcntl, "flock", real)
    assert remove_stale_staging(tmp_path / "datasets") == [] and folder.is_dir()
    release(folder, fd)


def test_without_flock_the_staging_is_unknown_and_left_to_a_server_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    root = tmp_path / "datasets" / ".uploads"
    root.mkdir(parents=True)
    monkeypatch.setattr(staging_owner.fcntl, "flock", no_flock)
    folder, fd = make_owned(root)
    assert fd is None and owner_state(folder) is Owner.UNKNOWN
    assert remove_stale_staging(tmp_path / "datasets") == [] and folder.is_dir()
    assert stale_entries(tmp_path / "datasets", unknown_too=True) == [folder]
    assert staging_owner.remove_unless_held(folder, unknown_too=True)
    assert list(root.iterdir()) == []
