"""Dataset claims across studio homes (jobs/dataset_claims.py): a CLI run with another
LORASTUDIO_HOME reading this home's dataset by its absolute path meets this home's caption
writers, and the reverse (was: each home kept its own claims, so neither saw the other). The
dataset folder itself is locked (flock on the directory), and a folder inside a home's datasets
root is the dataset of its top folder whichever home claims it; a real second process's lock
is named by its pid and dropped by the kernel when it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lorastudio.errors import DatasetBusy
from lorastudio.jobs.dataset_claims import READ, WRITE, DatasetClaim, claim_root
from lorastudio.jobs.homelock import HomeLock


@pytest.fixture
def homes(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "datasets" / "char" / "10_sks").mkdir(parents=True)
    (b / "datasets").mkdir(parents=True)
    for home in (a, b):
        HomeLock.for_cli_run(home).release()  # what every home has once lorastudio used it
    return a, b


def _take(home: Path, folder: Path | str, mode: str) -> DatasetClaim:
    return DatasetClaim.take(home, home / "datasets", [folder], mode, f"{mode}r in {home.name}", wait_s=0.2)


def test_another_homes_dataset_is_claimed_as_that_homes_dataset(homes: tuple[Path, Path]) -> None:
    a, b = homes
    char = a / "datasets" / "char"
    assert claim_root(char / "10_sks", b / "datasets") == char  # its top folder, as home a claims it
    assert claim_root(char / "10_sks", a / "datasets") == char
    assert claim_root(b / "elsewhere", a / "datasets") == b / "elsewhere"  # not under datasets/


def test_a_reader_of_another_home_meets_this_homes_caption_writer(homes: tuple[Path, Path]) -> None:
    a, b = homes
    char = a / "datasets" / "char"
    with _take(a, "char", WRITE), pytest.raises(DatasetBusy, match=r"captions written by pid \d+ of another"):
        _take(b, char / "10_sks", READ)  # b's CLI run, by the absolute path of a sub-folder
    with _take(b, char / "10_sks", READ):
        with pytest.raises(DatasetBusy, match="in use by pid"):
            _take(a, "char", WRITE)
        _take(a, "char", READ).release()  # readers share, across homes too
        _take(b, char, READ).release()
    _take(a, "char", WRITE).release()  # every claim above was released
    outside = b / "plain"
    outside.mkdir()
    with _take(a, outside, WRITE), pytest.raises(DatasetBusy):  # a folder under no datasets root
        _take(b, outside, READ)


def test_another_process_is_named_and_its_death_frees_the_folder(homes: tuple[Path, Path]) -> None:
    a, b = homes
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from lorastudio.jobs.dataset_claims import DatasetClaim;"
            f" DatasetClaim.take(Path({str(b)!r}), Path({str(b / 'datasets')!r}),"
            f" [Path({str(a / 'datasets' / 'char')!r})], 'read', 'b run');"
            " print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(DatasetBusy, match=f"pid {child.pid} of another lorastudio home"):
            _take(a, "char", WRITE)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    _take(a, "char", WRITE).release()  # the kernel dropped the dead reader's lock
