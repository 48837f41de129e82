"""An upload's or an import's copy of a file (session 28 chaos audit, Known problems): the copy was
one call wrapped as a write, so a read error of its SOURCE (EIO on the file being read) was told
as "write failed: ... could not be stored (<dataset>): Input/output error", and a kohya import's
failure named its staging folder (datasets/.uploads/kohya-<id>/<name>) instead of the dataset.
Now a failed read is ReadFailed naming the file read ("read failed: the source file X could not
be read", then what to do: RELIABILITY 1284), a failed write names the dataset the import makes."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import lorastudio.data.safe_open as safe_open
from cli_runner import run_cli
from lorastudio.data.uploads import UploadBatch
from lorastudio.errors import READ_ADVICE, ReadFailed, reading
from lorastudio.settings import get_settings


class _BadSector(io.RawIOBase):
    """A file whose first `good` bytes read and whose next read fails with EIO (a bad sector, a
    network file system gone)."""

    def __init__(self, data: bytes, good: int):
        self._data, self._at, self._good = data, 0, good

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._at >= self._good:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        n = min(len(buffer), self._good - self._at)
        buffer[:n] = self._data[self._at : self._at + n]
        self._at += n
        return n


def _png(path: Path, side: int = 64) -> Path:
    pixels = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def test_a_source_read_error_is_a_failed_read_of_that_file_not_a_write(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    data = _png(tmp_path / "a.png").read_bytes()
    for source, said in (
        (None, "the uploaded file a.png"),
        (tmp_path / "a.png", f"the source file {tmp_path / 'a.png'}"),
    ):
        with UploadBatch(root, root / "pets", 10**8) as batch, pytest.raises(ReadFailed) as err:
            batch.add("a.png", io.BufferedReader(_BadSector(data, 100), 16), source=source)
        assert (
            str(err.value)
            == f"read failed: {said} could not be read: Input/output error; {READ_ADVICE[errno.EIO]}"
        )
    assert not (root / "pets").exists()


def test_an_import_whose_source_cannot_be_read_names_the_file(capsys, monkeypatch, tmp_path: Path) -> None:
    source = tmp_path / "pics"
    source.mkdir()
    _png(source / "a.png")
    bad = _png(source / "b.png")
    real = safe_open.open_in_folder

    def unreadable_b(path: Path, *args, **kwargs):
        opened = real(path, *args, **kwargs)
        if Path(path).name != "b.png":
            return opened
        opened.close()
        return io.BufferedReader(_BadSector(bad.read_bytes(), 0))

    monkeypatch.setattr(safe_open, "open_in_folder", unreadable_b)
    got, text = run_cli(capsys, monkeypatch, "datasets", "import", str(source), "--name", "pets")
    assert got == 1 and "Traceback" not in text, text
    assert (
        f"error: read failed: the source file {bad} could not be read: Input/output error; the disk" in text
    ), text
    assert "write failed" not in text and not (get_settings().datasets_dir / "pets").exists()


def test_a_kohya_imports_failed_write_names_the_dataset_not_its_staging(
    capsys, monkeypatch, tmp_path: Path
) -> None:
    from file_limit import file_size_limit

    img = tmp_path / "img"
    (img / "10_sks ball").mkdir(parents=True)
    _png(img / "10_sks ball" / "a.png", 96)  # ~27 KB: past the limit
    with file_size_limit(8000):
        got, text = run_cli(capsys, monkeypatch, "datasets", "import", str(img), "--name", "k", "--kohya")
    dataset = get_settings().datasets_dir / "k-10_sks ball"
    assert got == 1 and "Traceback" not in text, text
    assert (
        f"write failed: a.png of the upload to {dataset.name} could not be stored ({dataset}): File too large"
        in text
    ), text
    assert ".uploads" not in text


def test_a_failed_reads_message_says_what_to_do_by_its_errno() -> None:
    """ReadFailed said the system's reason alone ("Permission denied"), where a failed write says
    what to do (fix 757): now each errno of READ_ADVICE has its advice; another has none."""
    for code, advice in ((errno.EACCES, "give that user read permission"), (errno.ESTALE, "mount it again")):
        with pytest.raises(ReadFailed) as err, reading("the source file /m/a.png could not be read"):
            raise OSError(code, os.strerror(code), "/m/a.png")
        assert str(err.value).startswith(
            f"read failed: the source file /m/a.png could not be read: {os.strerror(code)}; "
        )
        assert advice in str(err.value) and str(err.value).endswith("then retry")
    with pytest.raises(ReadFailed) as err, reading("the source file /m/a.png could not be read"):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    assert (
        str(err.value)
        == f"read failed: the source file /m/a.png could not be read: {os.strerror(errno.EINVAL)}"
    )
