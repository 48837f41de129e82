"""jobs/diskspace.py: a worker's full-disk failure is told as "no space left on device", naming
the run folder and the space free, whatever library wrote the file."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import pytest

from lorastudio.jobs import diskspace
from lorastudio.jobs.diskspace import explain_write_failure

Usage = namedtuple("Usage", "total used free")
ZIP = "RuntimeError: [enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing file data/0: file write failed"


def test_full_disk_messages_are_rewritten_and_others_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "outputs" / "run"  # missing: measured on its nearest existing parent
    monkeypatch.setattr(diskspace.shutil, "disk_usage", lambda p: Usage(8 << 20, 8 << 20, 3 << 20))
    enospc = f"OSError: [Errno 28] No space left on device: '{run}/checkpoints/.staging-1/state.pt'"
    told = explain_write_failure(enospc, run)
    assert told.startswith(f"no space left on device while writing the run's files in {run} (3.0 MB free)")
    assert told.endswith(f"({enospc})")
    assert explain_write_failure(told, run) == told  # already said: unchanged
    zipped = explain_write_failure(ZIP, run)
    assert zipped.startswith("no space left on device") and "PytorchStreamWriter" not in zipped
    short = (
        "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0"  # a short write
    )
    assert explain_write_failure(short, run).startswith("no space left on device")
    assert explain_write_failure("ValueError: bad", run) == "ValueError: bad"
    monkeypatch.setattr(diskspace.shutil, "disk_usage", lambda p: Usage(1 << 40, 1 << 39, 1 << 39))
    assert explain_write_failure(ZIP, run) == ZIP  # plenty of room: not a full disk, said as it was
    assert explain_write_failure(short, run) == short


def test_a_full_disk_elsewhere_is_named_not_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The encode cache's disk full (its lock file could not be made), the run folder's roomy: the
    message named the run folder and its free space (RELIABILITY 1073)."""
    run, cache = tmp_path / "outputs" / "run", tmp_path / "cache" / "encoded"
    room = {str(cache): 0, str(run.parent): 64 << 30}
    monkeypatch.setattr(diskspace, "free_bytes", lambda p: room.get(str(p), 1 << 40))
    cause = f"the on-disk encode cache cannot be used\n  - {cache}/.readers.lock: No space left on device"
    told = explain_write_failure(cause, run)
    assert told.startswith(f"no space left on device while writing in {cache} (0.0 MB free)"), told
    assert str(run) not in told and told.endswith(f"({cause})")


def test_the_studios_own_full_disk_words_get_the_space_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's refused write is worded by errors.writing since fix 1070 ("no space left on
    device: the checkpoint ... could not be written (PATH) ..."), which the worker passed on as it
    was: the space free on that disk was no longer said (test_disk_full_real found it)."""
    run = tmp_path / "outputs" / "run"
    monkeypatch.setattr(diskspace.shutil, "disk_usage", lambda p: Usage(8 << 20, 8 << 20, 3 << 20))
    own = f"no space left on device: the checkpoint step-000002 could not be written ({run}/checkpoints/step-000002); free some space and retry"
    told = explain_write_failure(own, run)
    assert told == f"{own} (3.0 MB free)"
    assert explain_write_failure(told, run) == told  # already said: unchanged
