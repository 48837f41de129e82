"""git's "racy" case in the decoded record (RELIABILITY 212): a file rewritten to the same size
within the same tick of the file-time clock as the write its check decoded keeps its whole key
(size, mtime, inode, ctime), so the record cannot tell the new contents from the decoded ones.
An entry is therefore recorded only when the file's ctime was safely older than the moment its
key was taken (decoded.racy); a racy one is decoded again by the next check. The tick is faked
here (decoded.file_clock_ns), never slept on."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from lorastudio.data import decoded
from lorastudio.data.decoded import RACY_COARSE_NS, RACY_NS, DecodedRecord, file_key, racy
from lorastudio.data.safe_open import folder_identity
from lorastudio.data.scan import scan_dataset
from undecodable_images import noisy, record_full_decodes


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(2):
        (data / f"img{i}.png").write_bytes(noisy("PNG", 32, seed=i))
        (data / f"img{i}.txt").write_text(f"caption {i}")
    return data


def _scan(data: Path, tmp_path: Path) -> None:
    scan_dataset(data, resolution=32, multiple=16, decoded_dir=tmp_path / "records", decode_budget_s=math.inf)


def test_a_file_keyed_within_its_last_writes_tick_is_decoded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data(tmp_path)
    full = record_full_decodes(monkeypatch)
    newest = max(os.stat(p).st_ctime_ns for p in data.iterdir())
    monkeypatch.setattr(decoded, "file_clock_ns", lambda: newest)  # the scan in the writes' tick
    _scan(data, tmp_path)
    assert sorted(full) == ["img0.png", "img1.png"]
    record = DecodedRecord.load(tmp_path / "records", data, folder_identity(data))
    assert record.files == {}  # racy: a rewrite in that tick would keep the key; nothing trusted
    full.clear()
    _scan(data, tmp_path)  # still the same tick: decoded again, still not trusted
    assert sorted(full) == ["img0.png", "img1.png"]
    full.clear()
    monkeypatch.setattr(decoded, "file_clock_ns", lambda: newest + RACY_NS + 1)  # the tick is over
    _scan(data, tmp_path)
    assert sorted(full) == ["img0.png", "img1.png"]  # decoded once more, now recorded
    full.clear()
    _scan(data, tmp_path)
    assert full == []


def test_the_margin_is_the_file_systems_tick(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    path.write_bytes(b"x")
    key = file_key(path)
    assert key is not None
    ctime = key[3]
    assert racy(key, ctime) and racy(key, ctime + RACY_NS - 1)
    assert not racy(key, ctime + RACY_NS)
    whole = (*key[:3], 1_700_000_000_000_000_000)  # a ctime in whole seconds: a coarse file system
    assert racy(whole, whole[3] + RACY_NS + 1) and racy(whole, whole[3] + RACY_COARSE_NS - 1)
    assert not racy(whole, whole[3] + RACY_COARSE_NS)


def test_add_records_only_a_settled_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data(tmp_path)
    path = data / "img0.png"
    key = file_key(path)
    assert key is not None
    record = DecodedRecord.load(tmp_path / "records", data, folder_identity(data))
    info = decoded.ImageInfo(32, 32, 1)
    assert not record.add(path, key, info, keyed_ns=key[3])  # keyed in its write's tick
    assert record.known(path) is None
    assert record.add(path, key, info, keyed_ns=key[3] + RACY_NS)
    assert record.known(path) == info
