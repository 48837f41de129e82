"""The model-file fingerprint memo (data/fingerprint.py `_file_memo`) kept one entry per file
version the process ever read, never evicted (RELIABILITY Known problems): a server whose model
files are added or changed grew it for ever. Now it keeps one entry a path (a changed file
replaces its entry) and at most MEMO_MAX paths, the least recently used forgotten first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lorastudio.data import fingerprint


@pytest.fixture(autouse=True)
def _empty_memo() -> None:
    fingerprint._file_memo.clear()


def test_a_file_changed_again_and_again_keeps_one_entry(tmp_path: Path) -> None:
    path = tmp_path / "vae.safetensors"
    digests = set()
    for n in range(20):
        path.write_bytes(b"weights %d" % n)
        os.utime(path, ns=(n * 10**9, n * 10**9))
        digests.add(fingerprint._sampled_digest(path))
    assert len(digests) == 20  # each version read and told apart
    assert len(fingerprint._file_memo) == 1


def test_the_memo_keeps_the_most_recently_used_files_up_to_its_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fingerprint, "MEMO_MAX", 8)
    files = []
    for n in range(12):
        files.append(tmp_path / f"shard-{n}.safetensors")
        files[-1].write_bytes(b"shard %d" % n)
    first = fingerprint._sampled_digest(files[0])
    for path in files[1:]:
        fingerprint._sampled_digest(path)
        assert fingerprint._sampled_digest(files[0]) == first  # used again: stays
    assert len(fingerprint._file_memo) == 8
    assert str(files[0]) in fingerprint._file_memo and str(files[1]) not in fingerprint._file_memo
    reads: list[str] = []
    real_open = Path.open

    def counted(self: Path, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counted)
    assert fingerprint._sampled_digest(files[0]) == first and reads == []  # from the memo
    fingerprint._sampled_digest(files[1])
    assert reads == ["shard-1.safetensors"]  # forgotten: read again
