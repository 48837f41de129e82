"""What a server left running keeps per job: bounded by the jobs kept, not by the jobs done
(bench/soak.py is the long version against a real `lorastudio serve`)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import jobs_fake_workers as fakes
import pytest
from test_jobs_service import _cfg

from lorastudio.jobs import service as service_module
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.records import Job
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

KEPT = 3  # FINISHED_KEPT for the test


def _jobs_alive() -> int:
    gc.collect()
    return sum(isinstance(o, Job) for o in gc.get_objects())


def test_finished_jobs_are_not_kept_in_memory_forever(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job of a server's life stayed in its memory (config, metric history up to 2,000
    points, warnings) after it ended, deleted or not: a studio running for weeks grew by every
    run. Now the live jobs and the newest FINISHED_KEPT finished ones are kept (the store has
    every record)."""
    monkeypatch.setattr(service_module, "FINISHED_KEPT", KEPT, raising=False)
    model = tiny_model("flux")
    # not started: no dispatcher takes the queue, so each job stays queued until cancelled
    service = JobService(
        settings, RunStore.open(settings.db_path), GpuArbiter(), worker_target=fakes.hang_ignoring_stop
    )
    try:
        before = _jobs_alive()
        cancelled = []
        for i in range(KEPT + 6):  # queued behind it, then cancelled: each job ends
            queued = service.submit(_cfg(model, f"queued-{i}"), queue=True)
            assert service.stop(save=False, job_id=queued["id"])["status"] == "cancelled"
            cancelled.append(queued["id"])
        assert _jobs_alive() - before <= KEPT  # the newest ended ones
        assert service.job(cancelled[-1])["status"] == "cancelled"  # the newest are still answered
        assert service.store.get_run(cancelled[0])["status"] == "cancelled"  # the store keeps all
    finally:
        service.shutdown()
