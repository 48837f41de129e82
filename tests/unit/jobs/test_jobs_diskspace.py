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
    enospc = "OSError: [Errno 28] No space left on device: '/x/state.pt'"
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
