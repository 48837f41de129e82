"""An upload into a dataset folder on another file system (session 28 surfaces audit, RELIABILITY
759): the upload stages under `datasets/.uploads/` and renamed each file into the dataset, so a
dataset folder that is a mount point of its own (another disk, a container volume) refused every
upload with EXDEV, answered as a raw OSError "Invalid cross-device link: <staging> -> a.png". Now
the file is copied beside its target and renamed there (data/cross_device.py)."""

from __future__ import annotations

import errno
import io
import os
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.data import cross_device
from lorastudio.data.uploads import UploadBatch


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _upload(root: Path, name: str) -> list[str]:
    with UploadBatch(root, root / name, 10**8) as batch:
        batch.add("a.png", io.BytesIO(_png()))
        batch.add("a.txt", io.BytesIO(b"a green square"))
        batch.add("a.png", io.BytesIO(_png()), slot="control")
        return batch.commit().stored


def _left(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if ".locks" not in p.parts)


def test_a_rename_across_file_systems_is_a_copy_then_a_rename_beside_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "datasets"
    (root / "pets").mkdir(parents=True)
    real = os.replace

    def across(src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # the staging's file system is another
        if src_dir_fd is None and ".uploads" in Path(os.fsdecode(src)).parts:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), os.fsdecode(src), os.fsdecode(dst))
        return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(cross_device.os, "replace", across)
    assert sorted(_upload(root, "pets")) == ["a.png", "a.txt", "control/a.png"]
    assert _left(root / "pets") == ["a.png", "a.txt", "control", "control/a.png"]  # no hidden copy left
    assert (root / "pets" / "a.txt").read_text() == "a green square"
    assert [p for p in (root / ".uploads").rglob("*") if p.is_file()] == []  # the staging emptied


def test_an_upload_into_a_dataset_that_is_a_mount_point(tmp_path: Path) -> None:
    """The real thing: a tmpfs mounted as the dataset folder (root only)."""
    root = tmp_path / "datasets"
    folder = root / "pets"
    folder.mkdir(parents=True)
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)]).returncode
    ):
        pytest.skip("mounting a tmpfs needs root")
    try:
        assert sorted(_upload(root, "pets")) == ["a.png", "a.txt", "control/a.png"]
        assert _left(folder) == ["a.png", "a.txt", "control", "control/a.png"]
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_dataset_disk_names_the_file(tmp_path: Path) -> None:
    """A tmpfs of 64 KB as the dataset (root only): the copy of a 190 KB image fails with
    NoSpaceLeft naming the image and the dataset, and leaves no hidden copy there."""
    import numpy as np

    from lorastudio.errors import NoSpaceLeft

    root = tmp_path / "datasets"
    folder = root / "pets"
    folder.mkdir(parents=True)
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)]).returncode
    ):
        pytest.skip("mounting a tmpfs needs root")
    buf = io.BytesIO()
    Image.fromarray((np.random.default_rng(0).random((256, 256, 3)) * 255).astype("uint8")).save(
        buf, format="PNG"
    )
    try:
        with UploadBatch(root, folder, 10**8) as batch, pytest.raises(NoSpaceLeft) as full:
            batch.add("big.png", io.BytesIO(buf.getvalue()))
            batch.commit()
        assert str(full.value) == (
            f"no space left on device: big.png of the upload to pets could not be stored ({folder}); "
            "free some space and retry"
        )
        assert _left(folder) == []
    finally:
        subprocess.run(["umount", str(folder)], check=True)
