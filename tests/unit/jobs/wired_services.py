"""The job service and the caption jobs wired as the API wires them (api/routes/captions.py),
with a training worker that hangs ignoring stop and a slow CPU captioner: for tests of what the
two refuse of each other (dataset locks, validation-folder claims)."""

from __future__ import annotations

import jobs_fake_workers as fakes
from caption_fake_workers import slow_fake_captioner

from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService, Timeouts
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings


def wired_services(settings: Settings) -> tuple[JobService, CaptionJobs]:
    """A started JobService and its CaptionJobs sharing one GPU arbiter, each watching the other."""
    arbiter = GpuArbiter()
    service = JobService(
        settings,
        RunStore.open(settings.db_path),
        arbiter,
        worker_target=fakes.hang_ignoring_stop,
        timeouts=Timeouts(stop_grace_s=0.5, kill_grace_s=0.5),
    ).start()
    captions = CaptionJobs(
        settings, arbiter, service.datasets_in_use, target=slow_fake_captioner, host_device=lambda: "cpu"
    )
    service.watch_captioning(captions.busy_jobs)
    return service, captions
