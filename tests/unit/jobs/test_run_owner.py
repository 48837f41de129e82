"""A CLI run killed outright, read from another PID namespace (the next container on the same
volume, a reader on the host): its owner lock (jobs/run_owner.py) tells the reader what the pid
cannot. The other namespace is faked in the recorded start token; the lock is a real flock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.run_owner import hold_owner_lock, owner_lock_path, release_owner_lock
from lorastudio.jobs.store import RunStore
from lorastudio.processes import start_token


def _record(store: RunStore, run_id: str, token: str) -> None:
    store.create_run(
        run_id,
        "out",
        "sdxl",
        {},
        "2026-12-07T00:00:00Z",
        source="cli",
        status=JobStatus.RUNNING,
        owner=(1, token),
    )


def _store_and_other_namespace(home: Path) -> tuple[RunStore, str]:
    """The home's run store and a start token of pid 1 in another PID namespace of this kernel."""
    host, boot, _, ticks = (start_token(os.getpid()) or "").split("|")
    return RunStore.open(home / "lorastudio.db", recover=False), "|".join(
        (host + "-next-container", boot, "pid:[4026999999]", ticks)
    )


def test_a_cli_run_of_another_namespace_is_settled_once_its_lock_is_free(tmp_path: Path) -> None:
    """Owner pid 1 of another PID namespace, same kernel: while its lock is held the run stays
    running (that pid cannot be told from a live one); once the lock is free (its owner died) the
    reader marks it interrupted and removes the lock file. Without the lock it stayed running."""
    home = tmp_path / "home"
    store, other_namespace = _store_and_other_namespace(home)
    fd = hold_owner_lock(home, "run1")
    assert fd is not None
    _record(store, "run1", other_namespace)
    assert store.settle_dead_owners() == {}
    os.close(fd)  # the owner dies: the kernel frees its lock, the file stays
    settled = store.settle_dead_owners()
    assert settled["run1"]["status"] == JobStatus.INTERRUPTED.value
    assert not owner_lock_path(home, "run1").exists()


def test_another_kernels_run_and_an_unlocked_record_are_left(tmp_path: Path) -> None:
    """Another boot id (another host: its locks may be local to it) or no lock file (a run
    recorded before these locks): nothing can be told, the run is left as recorded."""
    home = tmp_path / "home"
    store = RunStore.open(home / "lorastudio.db", recover=False)
    other_kernel = "elsewhere|00000000-0000-0000-0000-000000000000|pid:[4026999999]|5"
    fd = hold_owner_lock(home, "run2")
    release_owner_lock(home, "run2", fd)  # ended cleanly: no file left
    owner_lock_path(home, "run3").parent.mkdir(parents=True, exist_ok=True)
    owner_lock_path(home, "run3").touch()  # a free lock, but another kernel's run
    _record(store, "run2", start_token(os.getpid()).replace("pid:[", "pid:[9"))  # type: ignore[union-attr]
    _record(store, "run3", other_kernel)
    assert store.settle_dead_owners() == {}


def test_a_lock_file_held_by_another_process_is_not_taken_for_the_runs(tmp_path: Path) -> None:
    """RELIABILITY 1243: a run whose lock file was already there and held (planted, a backup
    tool's lock) ran without the lock, as meant, but the file stayed: once its holder let go a
    reader of another namespace found it free and settled the live run as interrupted. The file
    the run could not lock is now removed, and the reader falls back to "cannot be told"."""
    home = tmp_path / "home"
    store, other_namespace = _store_and_other_namespace(home)
    path = owner_lock_path(home, "run4")
    path.parent.mkdir(parents=True, exist_ok=True)
    planted = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(planted, fcntl.LOCK_EX)
    assert hold_owner_lock(home, "run4") is None  # the run goes on without its lock
    _record(store, "run4", other_namespace)
    os.close(planted)  # the other holder lets go; the run's owner lives on
    assert store.settle_dead_owners() == {}


def test_a_fifo_or_a_link_in_a_lock_files_place_is_no_lock(tmp_path: Path) -> None:
    """RELIABILITY 1249: a reader opened the lock file following links and without O_NONBLOCK: a
    FIFO planted at a live CLI run's lock path (its id is in GET /api/runs) blocked the server's
    run listing for ever with no writer, and with one (held open here) was flock'ed and taken for
    a dead owner's lock: the live run settled as interrupted. A link there was opened through.
    Neither is a run's lock now: the run is left as recorded."""
    home = tmp_path / "home"
    store, other_namespace = _store_and_other_namespace(home)
    fd = hold_owner_lock(home, "run5")
    assert fd is not None
    _record(store, "run5", other_namespace)
    path = owner_lock_path(home, "run5")
    path.unlink()
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # the old reader's open then returned
    try:
        assert store.settle_dead_owners() == {} and path.exists()
    finally:
        os.close(writer)
    path.unlink()
    (tmp_path / "free").touch()
    path.symlink_to(tmp_path / "free")  # a free lock elsewhere
    assert store.settle_dead_owners() == {} and (tmp_path / "free").exists()
    os.close(fd)


def test_a_dead_owners_lock_file_goes_whoever_settles_its_run(tmp_path: Path) -> None:
    """RELIABILITY 1251: a CLI run killed in this namespace was settled by the pid rule, which
    never looked at its lock, and one settled by a version before these locks (or deleted) was
    never looked at again: each left its lock file for good. Free ones now go; a held one of a
    run not yet recorded (its lock comes first) and a live run's stay."""
    import subprocess
    import sys

    home = tmp_path / "home"
    store = RunStore.open(home / "lorastudio.db", recover=False)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    token = start_token(child.pid)
    child.kill()
    child.wait()  # a killed owner of this namespace: process_gone tells it
    os.close(hold_owner_lock(home, "killed"))  # type: ignore[arg-type]
    _record(store, "killed", token)  # type: ignore[arg-type]
    os.close(hold_owner_lock(home, "settled"))  # type: ignore[arg-type]  # an older version settled it
    held = hold_owner_lock(home, "starting")
    alive = hold_owner_lock(home, "alive")
    _record(store, "alive", start_token(os.getpid()))  # type: ignore[arg-type]
    assert store.settle_dead_owners()["killed"]["status"] == JobStatus.INTERRUPTED.value
    left = sorted(p.stem for p in owner_lock_path(home, "x").parent.iterdir())
    assert left == ["alive", "starting"], left
    for fd in (held, alive):
        os.close(fd)  # type: ignore[arg-type]
