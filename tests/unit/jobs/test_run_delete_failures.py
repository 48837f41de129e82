"""A run delete that fails or is killed half-way (session 28 chaos audit). It deleted the run's
record first and then renamed its output folder aside: a rename the file system refused (a
read-only outputs root) failed the delete with the record already gone, leaving an output folder
(its LoRA still listed) that no record could delete any more, through the API or the UI; a kill
between the two left the same. Now the folder goes aside first: a refused rename keeps both, a
record that cannot be deleted puts the folder back, and a kill between is finished by the next
start (the trash's name carries the run's id: the record and the log go too)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import lorastudio.jobs.run_delete as run_delete
from lorastudio.errors import NoSpaceLeft, NotFound, WriteFailed
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.leftovers import start_leftover_cleanup
from lorastudio.jobs.records import JobStatus, now_iso
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.worker_log import log_path
from lorastudio.settings import Settings


def _finished_run(settings: Settings, run_id: str = "0123456789ab") -> Path:
    store = RunStore.open(settings.db_path)
    store.create_run(run_id, "out", "flux", {"steps": 4}, now_iso(), status=JobStatus.COMPLETED)
    store.close()
    folder = settings.outputs_dir / "out"
    folder.mkdir(parents=True)
    (folder / "out.safetensors").write_bytes(b"lora")
    return folder


def _service(settings: Settings) -> JobService:
    return JobService(settings, RunStore.open(settings.db_path), GpuArbiter())


def test_a_refused_rename_or_record_delete_keeps_the_run_whole(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _finished_run(settings)
    service = _service(settings)

    def read_only(src: object, dst: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src))

    monkeypatch.setattr(run_delete.os, "rename", read_only)
    with pytest.raises(WriteFailed, match=r"^write failed: the output folder out could not be removed \("):
        service.delete_run("0123456789ab")
    monkeypatch.undo()
    assert service.store.get_run("0123456789ab")["status"] == "completed"  # the record: still there
    assert (folder / "out.safetensors").read_bytes() == b"lora"

    def full(run_id: str) -> None:
        raise NoSpaceLeft("the run store could not be written", settings.db_path)

    monkeypatch.setattr(service.store, "delete_run", full)
    with pytest.raises(NoSpaceLeft):
        service.delete_run("0123456789ab")
    monkeypatch.undo()
    assert (folder / "out.safetensors").read_bytes() == b"lora"  # put back
    assert [p.name for p in settings.outputs_dir.iterdir()] == ["out"]
    assert service.delete_run("0123456789ab") == {"deleted": "0123456789ab", "files_removed": True}
    assert not folder.exists()


# Delete run argv[2] of the home argv[1], SIGKILLed when the record is deleted (after the
# folder went aside in the new order; at once, before the folder, in the old one).
_KILLED_AT_THE_RECORD = """
import os, signal, sys
from pathlib import Path
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.worker_log import log_path
from lorastudio.settings import Settings
settings = Settings(home=Path(sys.argv[1]))
store = RunStore.open(settings.db_path)
real = store.delete_run
def killed(run_id):
    if not (settings.outputs_dir / "out").exists():
        os.kill(os.getpid(), signal.SIGKILL)
    real(run_id)
    os.kill(os.getpid(), signal.SIGKILL)
store.delete_run = killed
JobService(settings, store, GpuArbiter()).delete_run(sys.argv[2])
"""


def test_a_delete_killed_half_way_is_finished_by_the_next_start(settings: Settings) -> None:
    """Killed between its folder's rename aside and its record's delete: the record stayed (until
    its delete was sent again) for a run whose files the next start removed. The trash's name is
    the delete's journal now: the start deletes the record and the log, then the files."""
    folder = _finished_run(settings)
    log_path(settings, "0123456789ab").parent.mkdir(parents=True, exist_ok=True)
    log_path(settings, "0123456789ab").write_text("the run's log\n", encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AT_THE_RECORD, str(settings.home), "0123456789ab"],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not folder.exists()  # aside, in the trash the start removes
    cleanup = start_leftover_cleanup(settings)  # the next server start
    assert cleanup is not None
    cleanup.join(timeout=60)
    store = RunStore.open(settings.db_path)
    try:
        with pytest.raises(NotFound):
            store.get_run("0123456789ab")  # the delete finished: no record of files gone
    finally:
        store.close()
    assert list(settings.outputs_dir.iterdir()) == []
    assert not log_path(settings, "0123456789ab").exists()


def test_a_killed_delete_the_store_refuses_to_finish_keeps_its_trash(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start whose store cannot delete the record (a full disk) keeps the run's files aside
    (the record still lists the run) and the next start finishes the delete."""
    _finished_run(settings)
    trash = run_delete.take_output_dir_aside(settings.outputs_dir, "out", "0123456789ab")
    assert isinstance(trash, Path) and trash.name.endswith(".run-0123456789ab")

    def full(self: RunStore, run_id: str) -> None:
        raise NoSpaceLeft("the run store could not be written", settings.db_path)

    with monkeypatch.context() as patch:
        patch.setattr(RunStore, "delete_run", full)
        cleanup = start_leftover_cleanup(settings)
        if cleanup is not None:
            cleanup.join(timeout=60)
    assert (trash / "out.safetensors").read_bytes() == b"lora"  # kept for the next start
    cleanup = start_leftover_cleanup(settings)
    assert cleanup is not None
    cleanup.join(timeout=60)
    assert list(settings.outputs_dir.iterdir()) == []
    store = RunStore.open(settings.db_path)
    try:
        with pytest.raises(NotFound):
            store.get_run("0123456789ab")
    finally:
        store.close()


def test_an_output_folder_that_is_a_link_goes_aside_as_a_link_never_its_target(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link standing for the output folder is renamed aside too (the journal's name), put back
    when the record cannot be deleted, and only the link is removed: never the folder it names."""
    store = RunStore.open(settings.db_path)
    store.create_run("0123456789ab", "out", "flux", {"steps": 4}, now_iso(), status=JobStatus.COMPLETED)
    store.close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.safetensors").write_bytes(b"not the run's to delete")
    settings.outputs_dir.mkdir(parents=True, exist_ok=True)
    (settings.outputs_dir / "out").symlink_to(elsewhere)
    service = _service(settings)

    def full(run_id: str) -> None:
        raise NoSpaceLeft("the run store could not be written", settings.db_path)

    monkeypatch.setattr(service.store, "delete_run", full)
    with pytest.raises(NoSpaceLeft):
        service.delete_run("0123456789ab")
    monkeypatch.undo()
    assert (settings.outputs_dir / "out").resolve() == elsewhere.resolve()  # the link put back
    assert service.delete_run("0123456789ab") == {"deleted": "0123456789ab", "files_removed": True}
    assert list(settings.outputs_dir.iterdir()) == []
    assert (elsewhere / "keep.safetensors").read_bytes() == b"not the run's to delete"
