"""Slow, real mounts (skipped where `mount -t tmpfs` is refused): what the default tests inject
by errno (tests/unit/data/test_mount_point_folders.py, test_data_thumbnails.py's full cache) on
a real tmpfs: a dataset folder and a run's folder that are mount points (the kernel's EBUSY),
and the thumbnail cache on a full disk (the kernel's ENOSPC). RELIABILITY 1071 and 1074."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from PIL import Image
from tmpfs_home import fill, small_disk

from lorastudio.cli.train_check import replace_outputs
from lorastudio.data.dataset_delete import delete_dataset
from lorastudio.data.dataset_names import rename_dataset
from lorastudio.data.thumbnails import thumbnail_jpeg
from lorastudio.errors import WRITE_ADVICE, ConfigError, WriteFailed
from lorastudio.settings import get_settings

pytestmark = pytest.mark.slow


def test_a_mounted_dataset_is_named_on_rename_and_delete_and_kept(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    with small_disk(root / "nas", 1) as nas:
        (nas / "a.png").write_bytes(b"x")
        for change in (
            lambda: rename_dataset(root, "nas", "nas2", in_use=set),
            lambda: delete_dataset(root, "nas", in_use=set),
        ):
            with pytest.raises(WriteFailed) as failed:
                change()
            assert WRITE_ADVICE[errno.EBUSY] in str(failed.value)
        assert (nas / "a.png").read_bytes() == b"x"
        assert sorted(p.name for p in root.iterdir()) == ["nas"]


def test_overwrite_of_a_mounted_run_folder_removes_nothing() -> None:
    settings = get_settings()
    with small_disk(settings.outputs_dir / "big-disk", 1) as run:
        (run / "big-disk.safetensors").write_bytes(b"x")
        with pytest.raises(ConfigError, match="is a mount point"):
            replace_outputs("big-disk", settings)
        assert os.listdir(run) == ["big-disk.safetensors"]


def test_a_full_thumbnail_cache_still_serves_thumbnails(tmp_path: Path) -> None:
    image = tmp_path / "a.png"
    Image.new("RGB", (300, 300), "red").save(image)
    with small_disk(tmp_path / "thumbs", 1) as cache:
        fill(cache)
        data = thumbnail_jpeg(image, 64, cache_dir=cache, max_pixels=10**8, decode_pixels=10**8)
        assert data.startswith(b"\xff\xd8")  # a JPEG, not NoSpaceLeft
        assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == ["filler.bin"]


def test_an_empty_mounted_run_folder_is_claimed_and_written_into_as_it_is() -> None:
    """RELIABILITY 1187 on a real tmpfs: the claim writes into the mount (its fresh mark), the
    folder stays the mount, and a killed run's clean-up empties it without trying to remove it."""
    from lorastudio.jobs.leftover_removal import remove_leftovers
    from lorastudio.jobs.leftovers import _run_leftovers
    from lorastudio.jobs.validation import output_name_problems
    from lorastudio.training.resume.run_lock import claim_run_dir, release_run_dir

    settings = get_settings()
    with small_disk(settings.outputs_dir / "disk", 1) as run:
        assert output_name_problems("disk", settings, set()) == []
        assert replace_outputs("disk", settings) is None
        release_run_dir(claim_run_dir(run, "run-1"))
        assert os.path.ismount(run) and os.listdir(run) == [".fresh-run"]
        listed = _run_leftovers(run)
        assert run not in listed
        remove_leftovers(listed)
        assert os.path.ismount(run) and os.listdir(run) == []
