"""Attacks on the dataset claims folder (jobs/dataset_claims.py): a link, a folder or a FIFO
planted at a dataset's lock file, a FIFO or garbage planted as a holder record, a link where
the claims folder goes. A claim never follows a link out of the folder, never hangs, never
raises anything but DatasetBusy naming the path, and garbage records are removed."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from lorastudio.errors import DatasetBusy
from lorastudio.jobs.dataset_claims import CLAIMS_DIR, READ, WRITE, DatasetClaim


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "datasets" / "set").mkdir(parents=True)
    return tmp_path / "home"


def _take(home: Path, mode: str = READ, holder: str = "t") -> DatasetClaim:
    return DatasetClaim.take(home, home / "datasets", ["set"], mode, holder, wait_s=0.2)


def _lock(home: Path) -> Path:
    """The lock file path of dataset `set` (taken once to learn its name)."""
    with _take(home, WRITE) as claim:
        return claim._held[0][2]


@pytest.mark.parametrize("plant", ["link", "dangling", "folder", "fifo"])
def test_a_planted_lock_entry_is_replaced_never_followed(home: Path, tmp_path: Path, plant: str) -> None:
    lock = _lock(home)
    target = tmp_path / "victim.txt"
    lock.parent.mkdir(exist_ok=True)
    if plant == "link":
        target.write_text("keep")
        lock.symlink_to(target)
    elif plant == "dangling":
        lock.symlink_to(target)  # O_CREAT through it made the file elsewhere
    elif plant == "folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    with _take(home, WRITE):
        assert lock.is_file() and not lock.is_symlink()
        with pytest.raises(DatasetBusy):
            _take(home, READ)
    assert (target.read_text() == "keep") if plant == "link" else not target.exists()


def test_a_folder_with_files_at_the_lock_is_a_clear_refusal(home: Path) -> None:
    lock = _lock(home)
    (lock / "inner").mkdir(parents=True)
    with pytest.raises(DatasetBusy) as err:
        _take(home)
    assert str(lock) in str(err.value)


def test_a_linked_claims_folder_is_refused(home: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (home / CLAIMS_DIR).symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(DatasetBusy) as err:
        _take(home)
    assert str(home / CLAIMS_DIR) in str(err.value) and list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize(
    "record",
    [
        {"pid": "OWN"},  # a live pid, no holder: the refusal message raised KeyError
        {"pid": "OWN", "mode": "write", "holder": ["x"], "dataset": "set", "brief": False},
        {"pid": -1, "mode": "write", "holder": "h", "dataset": "set", "brief": False},
        "not json {",
        "x" * 100_000,
    ],
    ids=["no-holder", "list-holder", "negative-pid", "not-json", "huge"],
)
def test_garbage_holder_records_are_removed_and_refusals_still_name_the_holder(home: Path, record) -> None:
    lock = _lock(home)
    with _take(home, WRITE, holder="the writer"):
        planted = lock.with_name(f"{lock.stem}.1-garbage.holder")
        if isinstance(record, dict):
            record = json.dumps({k: (os.getpid() if v == "OWN" else v) for k, v in record.items()})
        planted.write_text(record)
        with pytest.raises(DatasetBusy) as err:
            _take(home, READ)
        assert "the writer" in str(err.value) and not planted.exists()


def test_a_fifo_holder_record_does_not_hang_a_take(home: Path) -> None:
    lock = _lock(home)
    lock.parent.mkdir(exist_ok=True)
    fifo = lock.with_name(f"{lock.stem}.1-fifo.holder")
    os.mkfifo(fifo)
    outcome: list[object] = []

    def take() -> None:
        with _take(home, READ) as claim:
            outcome.append(len(claim._held))

    worker = threading.Thread(target=take, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # the old reader blocked opening the FIFO: a writer end lets it go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(5)
        pytest.fail("a FIFO planted as a holder record blocked the claim")
    assert outcome == [2]  # the dataset's path key and its inode key (claim_keys)


def test_a_killed_takers_staged_record_is_removed_and_the_claims_folder_goes(home: Path) -> None:
    """A taker killed between staging its holder record and renaming it (the session 34 flake of
    test_caption_cli_claims: a CLI caption frozen, then killed, while it took its second key) left
    `.<record>.<pid>-<hex>.tmp`, which no take removed: the claims folder stayed for ever
    (RELIABILITY 1282). Now the next take on that dataset removes it, as it removes a dead
    holder's record; a live writer's staging file is kept."""
    lock = _lock(home)
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid runs nothing now
    record = lock.with_name(f"{lock.stem}.{dead.pid}-abcdef.holder")
    lock.parent.mkdir()
    killed = lock.parent / f".{record.name}.{dead.pid}-0123ab.tmp"
    killed.write_text('{"pid": 1', encoding="utf-8")  # cut mid-write
    _take(home, WRITE).release()
    assert not lock.parent.exists()
    lock.parent.mkdir()
    live = lock.parent / f".{record.name}.{os.getpid()}-0123ab.tmp"  # this process's: a writer running
    live.write_text("{}", encoding="utf-8")
    _take(home, WRITE).release()
    assert [p.name for p in lock.parent.iterdir()] == [live.name]
