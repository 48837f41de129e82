"""data/dataset_delete.py: a dataset is moved aside to a hidden `.deleting-<hex>` and removed;
refused (nothing changed) while the job service says a live job uses it; a link is only unlinked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lorastudio.data.dataset_delete import delete_dataset
from lorastudio.errors import JobActive, NotFound


def _dataset(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(b"x")
    return folder


def test_delete_removes_the_folder_and_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    _dataset(root, "old")
    kept = _dataset(root, "kept")
    delete_dataset(root, "old", in_use=lambda: {kept.resolve()})
    assert sorted(p.name for p in root.iterdir()) == ["kept"]
    with pytest.raises(NotFound):
        delete_dataset(root, "old", in_use=set)


def test_a_dataset_in_use_is_refused_and_kept(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    busy = _dataset(root, "busy")
    with pytest.raises(JobActive, match="busy"):
        delete_dataset(root, "busy", in_use=lambda: {busy.resolve()})
    assert (busy / "a.png").is_file() and sorted(p.name for p in root.iterdir()) == ["busy"]


def test_a_link_is_unlinked_and_its_target_kept(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    target = _dataset(tmp_path, "elsewhere")
    root.mkdir()
    os.symlink(target, root / "link")
    delete_dataset(root, "link", in_use=set)
    assert not os.path.lexists(root / "link") and (target / "a.png").is_file()
