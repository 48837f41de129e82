"""A spawned worker's end unlinks the semaphores made in it (RELIABILITY 2121): the generation
worker, after a library made tqdm's multiprocessing lock, ended with os._exit past the lock's
finalizer, and the server's resource tracker printed "There appear to be 1 leaked semaphore
objects to clean up at shutdown" on its console when the server stopped. The training, caption
and rank workers end through the same processes.exit_worker."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from lorastudio.jobs.generation_worker import GenerationWorkerArgs
from lorastudio.processes import spawn_context
from semaphore_workers import locking_generation_worker

SHM = Path("/dev/shm")
JOBS = Path(__file__).resolve().parents[3] / "src" / "lorastudio" / "jobs"


@pytest.mark.skipif(not SHM.is_dir(), reason="POSIX named semaphores are files of /dev/shm on Linux")
def test_a_generation_workers_end_unlinks_the_semaphores_made_in_it():
    ctx = spawn_context()
    parent, child = ctx.Pipe()
    process = ctx.Process(
        target=locking_generation_worker,
        args=(GenerationWorkerArgs(parent_pid=os.getpid()), child),
        daemon=True,
    )
    process.start()
    child.close()
    try:
        kind, names = parent.recv()
        assert kind == "locks" and names, "tqdm made no multiprocessing lock: nothing to check"
        files = [SHM / f"sem.{name.lstrip('/')}" for name in names]
        assert all(f.exists() for f in files)  # the worker's lock, alive while it runs
        assert parent.recv()[0] == "ready"
        parent.send(None)  # the server's "exit"
        process.join(60)
    finally:
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0
    assert [f.name for f in files if f.exists()] == []


def test_every_workers_own_end_goes_through_exit_worker():
    """No worker main of the job service ends with a bare os._exit after its work (the exits
    before any work, a parent gone or a standby not used, make no lock)."""
    for name in ("worker.py", "generation_worker.py", "caption_worker.py", "rank_worker.py"):
        tree = ast.parse((JOBS / name).read_text(encoding="utf-8"))
        calls = {
            getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
        }
        assert "exit_worker" in calls, name
