"""data/decoded.py: the record of a dataset folder's fully decoded images (RELIABILITY 151) is a
cache: saved outside the folder and read back by another process's load, keyed by the file's
(size, mtime_ns, inode, ctime_ns), pruned to the folder's images, and an unreadable or older record is
simply empty (files are decoded again), never an error."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from PIL import Image

from lorastudio.data.decoded import DecodedRecord, file_key
from lorastudio.data.images import DECODE_RULES, ImageInfo
from lorastudio.data.safe_open import folder_identity


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "set"
    folder.mkdir()
    for name in ("a.png", "b.png"):
        buf = io.BytesIO()
        Image.new("RGB", (8, 6), "red").save(buf, format="PNG")
        (folder / name).write_bytes(buf.getvalue())
    return folder


def test_a_saved_record_is_read_back_and_keyed_by_the_file_version(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    records = tmp_path / "cache"
    fid = folder_identity(folder)
    record = DecodedRecord.load(records, folder, fid)
    for name in ("a.png", "b.png"):
        record.add(folder / name, file_key(folder / name), ImageInfo(8, 6, 1))
    record.save({"a.png", "b.png"})
    assert sorted(p.name for p in folder.iterdir()) == ["a.png", "b.png"]  # nothing written there
    again = DecodedRecord.load(records, folder, fid)
    assert again.known(folder / "a.png") == ImageInfo(8, 6, 1)
    os.utime(folder / "a.png", ns=(5, 5))  # another version of the file
    assert again.known(folder / "a.png") is None and again.wants_full(folder / "a.png")
    assert again.known(folder / "b.png") == ImageInfo(8, 6, 1)
    again.save({"b.png"})  # a.png left the folder: dropped from the record
    assert set(DecodedRecord.load(records, folder, fid).files) == {"b.png"}


def test_a_file_rewritten_in_place_with_its_size_and_mtime_put_back_is_decoded_again(tmp_path: Path) -> None:
    """`cp -p` of another file of the same size onto a reused inode keeps (size, mtime_ns, inode):
    only ctime, which no user call sets, tells the new contents from the recorded ones."""
    folder = _folder(tmp_path)
    records = tmp_path / "cache"
    fid = folder_identity(folder)
    path = folder / "a.png"
    record = DecodedRecord.load(records, folder, fid)
    record.add(path, file_key(path), ImageInfo(8, 6, 1))
    record.save()
    st = os.stat(path)
    other = bytearray(path.read_bytes())
    other[-20] ^= 0xFF  # another file of the same size
    with path.open("r+b") as fh:  # the same inode
        fh.write(bytes(other))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # its mtime copied, as cp -p does
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    assert DecodedRecord.load(records, folder, fid).known(path) is None  # decoded again


def test_a_record_of_the_version_without_ctime_reads_as_not_decoded(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    fid = folder_identity(folder)
    record = DecodedRecord.load(tmp_path / "cache", folder, fid)
    st = os.stat(folder / "a.png")
    old_row = [st.st_size, st.st_mtime_ns, st.st_ino, 8, 6, 1]  # version 2: (size, mtime_ns, inode)
    record.path.parent.mkdir(parents=True, exist_ok=True)
    record.path.write_text(json.dumps({"version": 2, "rules": DECODE_RULES, "files": {"a.png": old_row}}))
    again = DecodedRecord.load(tmp_path / "cache", folder, fid)
    assert again.known(folder / "a.png") is None and again.wants_full(folder / "a.png")


def test_a_file_changed_during_its_decode_is_not_recorded(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    record = DecodedRecord.load(tmp_path / "cache", folder, folder_identity(folder))
    before = file_key(folder / "a.png")
    (folder / "a.png").write_bytes((folder / "a.png").read_bytes() + b"x")
    record.add(folder / "a.png", before, ImageInfo(8, 6, 1), seconds=0.5)
    assert record.known(folder / "a.png") is None and record.spent_s == 0.5


def test_an_unreadable_or_older_record_is_empty(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    fid = folder_identity(folder)
    record = DecodedRecord.load(tmp_path / "cache", folder, fid)
    record.add(folder / "a.png", file_key(folder / "a.png"), ImageInfo(8, 6, 1))
    record.save()
    record.path.write_text("{not json")
    assert DecodedRecord.load(tmp_path / "cache", folder, fid).files == {}
    record.path.write_text(json.dumps({"version": 1, "files": {"a.png": [1, 2, 3]}}))
    assert DecodedRecord.load(tmp_path / "cache", folder, fid).files == {}
    other = DecodedRecord.load(tmp_path / "cache", folder, (fid[0], fid[1] + 1))  # a folder replaced
    assert other.path != record.path


def test_the_time_budget_stops_full_decodes(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    record = DecodedRecord.load(tmp_path / "cache", folder, folder_identity(folder), budget_s=1.0)
    assert record.wants_full(folder / "a.png")
    record.add(folder / "a.png", file_key(folder / "a.png"), ImageInfo(8, 6, 1), seconds=1.5)
    assert not record.wants_full(folder / "b.png")  # spent: b keeps the cheap check this time
