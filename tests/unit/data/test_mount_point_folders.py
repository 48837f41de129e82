"""A folder the studio renames or removes that is a mount point (a NAS share or a disk mounted
as a dataset, a model or a run's outputs): the rename fails with EBUSY, which was an unnamed
OSError (API 500 `{"error": "OSError", "detail": "Device or resource busy: ..."}`, CLI
"error: Device or resource busy: ...") and `train --overwrite` removed every file on the mounted
disk before failing the same way (RELIABILITY 1071). EBUSY is injected where a mount would give
it (CI cannot mount); `tests/reliability/test_mount_point_folders_real.py` mounts a tmpfs."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lorastudio.cli import train_check
from lorastudio.data import dataset_delete, dataset_names
from lorastudio.data.dataset_delete import delete_dataset
from lorastudio.data.dataset_names import rename_dataset
from lorastudio.errors import WRITE_ADVICE, ConfigError, DatasetError, WriteFailed
from lorastudio.settings import get_settings


def _busy(mounted: Path):
    real = os.rename

    def rename(src: object, dst: object) -> None:
        if Path(os.fsdecode(src)) == mounted:  # what the kernel answers for a mount point
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), os.fsdecode(src), os.fsdecode(dst))
        real(src, dst)

    return rename


@pytest.mark.parametrize("change", ["rename", "delete"])
def test_a_dataset_that_is_a_mount_point_is_named_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    root = tmp_path / "datasets"
    folder = root / "nas"
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(b"x")
    module = dataset_names if change == "rename" else dataset_delete
    monkeypatch.setattr(module.os, "rename", _busy(folder))
    with pytest.raises(WriteFailed) as failed:  # was OSError "Device or resource busy"
        if change == "rename":
            rename_dataset(root, "nas", "nas2", in_use=set)
        else:
            delete_dataset(root, "nas", in_use=set)
    assert str(failed.value) == (
        f"write failed: the dataset nas could not be {change}d ({folder}): Device or resource busy; "
        f"{WRITE_ADVICE[errno.EBUSY]}"
    )
    assert "mount point" in str(failed.value)
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["nas"]
    assert (folder / "a.png").is_file()


def test_overwrite_of_a_run_folder_that_is_a_mount_point_removes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = get_settings()  # the test's own home (studio_home)
    run = settings.outputs_dir / "big-disk"
    (run / "checkpoints").mkdir(parents=True)
    (run / "big-disk.safetensors").write_bytes(b"x")
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == run or real(p))
    with pytest.raises(ConfigError) as refused:  # was: every file removed, then EBUSY on the folder
        train_check.replace_outputs("big-disk", settings)
    (problem,) = refused.value.problems
    assert problem.field == "output_name" and "is a mount point" in problem.message
    assert "nothing in it was removed" in problem.message
    assert sorted(p.name for p in run.iterdir()) == ["big-disk.safetensors", "checkpoints"]


def test_a_run_folder_that_is_an_empty_mount_point_is_trained_into_not_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RELIABILITY 1187: a disk mounted at outputs/NAME (empty, or holding only its file system's
    lost+found) was refused as "already exists", and `--overwrite` refused it. Now the checks take
    it, the run claims it as it is (the same folder: never renamed or replaced; a second claim is
    refused), and a killed run's clean-up empties it without listing the folder itself."""
    from lorastudio.jobs.leftovers import _run_leftovers
    from lorastudio.jobs.validation import output_name_problems
    from lorastudio.training.resume.fresh_mark import FRESH_MARK
    from lorastudio.training.resume.run_lock import claim_run_dir, release_run_dir

    settings = get_settings()
    disk, plain = settings.outputs_dir / "disk", settings.outputs_dir / "plain"
    (disk / "lost+found").mkdir(parents=True)
    plain.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == disk or real(p))
    assert output_name_problems("disk", settings, set()) == []
    assert "already exists" in output_name_problems("plain", settings, set())[0].message
    assert train_check.replace_outputs("disk", settings) is None and (disk / "lost+found").is_dir()
    from lorastudio.config import TrainConfig
    from lorastudio.training.preflight import _preflight

    for name, taken in (("disk", False), ("plain", True)):  # the engine's own check before loading
        cfg = TrainConfig(family="flux", base_model="/nowhere", data_dir="none", output_name=name)
        with pytest.raises((ConfigError, DatasetError)) as refused:  # `disk`: on to its missing dataset
            _preflight(cfg, settings, "cpu")
        named = isinstance(refused.value, ConfigError) and "output_name" in {
            p.field for p in refused.value.problems
        }
        assert named is taken, refused.value
    inode = disk.stat().st_ino
    fd = claim_run_dir(disk, "run-1")
    try:
        assert disk.stat().st_ino == inode and (disk / FRESH_MARK).is_file()
        with pytest.raises(ConfigError, match="already exists"):
            claim_run_dir(disk, "run-2")  # held, and no longer empty
    finally:
        release_run_dir(fd)
    listed = _run_leftovers(disk)  # the killed fresh run's mark, not the disk nor its lost+found
    assert disk / FRESH_MARK in listed and disk not in listed and disk / "lost+found" not in listed
    with pytest.raises(ConfigError, match="already exists"):
        claim_run_dir(plain)  # a folder that is not a mount point: never written into
