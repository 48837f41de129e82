"""Worker targets that make a multiprocessing lock the way a library does in a real worker (tqdm's
progress-bar lock, which a diffusers pipeline's or a checkpoint load's bar makes), then run the
real worker main, for tests/unit/jobs/test_worker_semaphores.py (RELIABILITY 2121)."""

from __future__ import annotations

from typing import Any

from lorastudio.jobs.generation_worker import GenerationWorkerArgs, generation_worker_main


def _tqdm_lock_names() -> list[str]:
    """Make tqdm's lock as its first bar does; the names of its multiprocessing semaphores."""
    from tqdm import tqdm

    lock = tqdm.get_lock()
    return [m._semlock.name for m in getattr(lock, "locks", []) if hasattr(m, "_semlock")]


def locking_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    """Send ("locks", names), then be the real generation worker."""
    conn.send(("locks", _tqdm_lock_names()))
    generation_worker_main(args, conn)
