"""Dataset claims key a folder by what it is, not how it is spelled (jobs/dataset_claims.claim_keys):
on a case- or normalisation-insensitive file system `Set` and `set` are one folder, so a claim on
one meets a claim on the other. This machine's file system is case-sensitive: the test makes a
second name resolve to the same inode by answering os.stat for it with the real folder's stat
(what exFAT / APFS give), and the normalisation fallback is exercised with a name that does not
exist in the other Unicode form."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from lorastudio.errors import DatasetBusy
from lorastudio.jobs.dataset_claims import READ, WRITE, DatasetClaim


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "datasets" / "set").mkdir(parents=True)
    return tmp_path / "home"


def _take(home: Path, name: str, mode: str) -> DatasetClaim:
    return DatasetClaim.take(home, home / "datasets", [name], mode, f"holder of {name}", wait_s=0.2)


def test_two_names_of_one_inode_are_one_claim(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = home / "datasets" / "set"
    alias = home / "datasets" / "Set"  # on exFAT / NTFS / APFS: the same folder
    real_stat = os.stat

    def insensitive_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if isinstance(path, str | Path) and os.path.realpath(path) == os.path.realpath(alias):
            path = real
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", insensitive_stat)
    assert os.path.realpath(alias) != os.path.realpath(real)  # the path keys differ
    with _take(home, "set", WRITE), pytest.raises(DatasetBusy, match="holder of set"):
        _take(home, "Set", READ)
    with _take(home, "Set", READ), _take(home, "set", READ), pytest.raises(DatasetBusy):  # readers share
        _take(home, "set", WRITE)
    _take(home, "other", WRITE).release()  # another folder: its own claim
    _take(home, "Set", WRITE).release()  # every claim above was released


def test_a_folder_not_there_yet_is_keyed_by_its_normalised_path(home: Path) -> None:
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    with _take(home, nfc, WRITE):  # neither spelling exists: the NFC path keys them both
        with pytest.raises(DatasetBusy):
            _take(home, nfd, READ)
        (home / "datasets" / nfc).mkdir()  # made while claimed (an upload's new dataset)
        with pytest.raises(DatasetBusy):  # the later claim has its path key too
            _take(home, nfc, READ)
    _take(home, nfd, WRITE).release()
