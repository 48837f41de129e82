"""Dataset claims (jobs/dataset_claims.py) on odd dataset folders: one reached through a link
(another home's link to this home's dataset, or an outside folder linked into a home), one
deleted while claimed, one on a read-only file system. The claim is the folder reached, in
both homes; a deleted folder's claim releases cleanly and its new namesake is claimable."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lorastudio.errors import DatasetBusy
from lorastudio.jobs.dataset_claims import READ, WRITE, DatasetClaim
from lorastudio.jobs.homelock import HomeLock


@pytest.fixture
def homes(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "datasets" / "char").mkdir(parents=True)
    (b / "datasets").mkdir(parents=True)
    for home in (a, b):
        HomeLock.for_cli_run(home).release()
    return a, b


def _take(home: Path, folder: Path | str, mode: str) -> DatasetClaim:
    return DatasetClaim.take(home, home / "datasets", [folder], mode, f"{mode}r in {home.name}", wait_s=0.2)


def test_a_linked_dataset_is_claimed_as_the_folder_it_reaches(
    homes: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = homes
    (b / "datasets" / "linked").symlink_to(a / "datasets" / "char")
    outside = tmp_path / "outside"
    outside.mkdir()
    (a / "datasets" / "outer").symlink_to(outside)
    writer = _take(a, "char", WRITE)
    with pytest.raises(DatasetBusy):
        _take(b, "linked", READ)  # another home, through its link
    writer.release()
    reader = _take(b, "linked", READ)
    with pytest.raises(DatasetBusy):
        _take(a, "char", WRITE)
    reader.release()
    outer = _take(a, "outer", WRITE)
    with pytest.raises(DatasetBusy):
        _take(b, outside, READ)  # the outside folder by its own path, from another home
    outer.release()


def test_a_dataset_deleted_while_claimed_releases_and_its_namesake_is_claimable(
    homes: tuple[Path, Path],
) -> None:
    a, b = homes
    claim = _take(a, "char", READ)
    shutil.rmtree(a / "datasets" / "char")
    (a / "datasets" / "char").mkdir()  # made again by the user
    with pytest.raises(DatasetBusy):
        _take(a, "char", WRITE)  # this home's claim is by name: still held
    claim.release()
    _take(a, "char", WRITE).release()
    _take(b, a / "datasets" / "char", WRITE).release()
    assert not (a / "claims").exists() or not list((a / "claims").iterdir())  # no trace kept


def test_holders_of_a_lock_whose_claims_folder_was_just_removed_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A taker that found the lock busy reads its holders while the last holder releases and
    removes the empty claims folder: no holders (it then retries), not FileNotFoundError (a 500
    of one of 20 racing caption edits in CI). The folder vanishing between pathlib's is_dir check
    and its scandir is simulated: the glob raises as it did there."""
    from lorastudio.jobs.dataset_claims import holders

    claims = tmp_path / "claims"
    claims.mkdir()

    def vanished(self: Path, pattern: str):  # noqa: ANN202 - pathlib's own signature
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "glob", vanished)
    assert holders(claims / "abc.lock") == []
