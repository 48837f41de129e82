"""A run whose logs/ disk is full (jobs/worker_log.py): its log's writes are dropped (the run goes
on), and the run page's log note names the full disk instead of "no log recorded". The file
system's answer (os.statvfs) is faked as on a full disk and on one out of inodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lorastudio.api.routes.run_files import run_log
from lorastudio.jobs import worker_log
from lorastudio.jobs.worker_log import WorkerLog, log_path
from lorastudio.settings import Settings


class _Store:
    def get_run(self, run_id: str, max_points: int) -> dict[str, str]:
        return {"id": run_id, "source": "service"}


def _disk(monkeypatch: pytest.MonkeyPatch, free_blocks: int, free_inodes: int) -> None:
    # (bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax)
    answer = os.statvfs_result(
        (4096, 4096, 1000, free_blocks, free_blocks, 100, free_inodes, free_inodes, 0, 255)
    )
    monkeypatch.setattr(worker_log.os, "statvfs", lambda path: answer)


def test_a_full_logs_disk_is_named_where_the_log_is_empty_or_ends_early(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = log_path(settings, "r1").parent
    _disk(monkeypatch, free_blocks=0, free_inodes=50)
    note = run_log("r1", 500, _Store(), settings)["note"]
    assert note.startswith(f"no log recorded for this run: the disk of {logs} is full (0.0 MB free)")
    logs.mkdir(parents=True, exist_ok=True)
    log_path(settings, "r1").write_text("2026-12-07 01:00:00,000+0000 INFO lorastudio.worker: step 1\n")
    assert run_log("r1", 500, _Store(), settings)["note"].startswith("this log may end early: the disk of")
    _disk(monkeypatch, free_blocks=500, free_inodes=0)
    assert "out of inodes" in run_log("r2", 500, _Store(), settings)["note"]
    _disk(monkeypatch, free_blocks=500, free_inodes=50)  # room: as before
    assert run_log("r2", 500, _Store(), settings)["note"] == "no log recorded for this run yet"
    assert run_log("r1", 500, _Store(), settings)["note"] is None


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_log_write_the_disk_refuses_is_said_once_on_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    log = WorkerLog(tmp_path / "r1.log")
    log._file = open("/dev/full", "ab", buffering=0)  # noqa: SIM115 (every write: ENOSPC, as a full disk)
    try:
        log.write(b"a line\n")
        log.write(b"another\n")
    finally:
        log._file.close()
    said = capfd.readouterr().err
    assert said.count("cannot be written") == 1 and str(tmp_path / "r1.log") in said
    assert "No space left on device" in said
