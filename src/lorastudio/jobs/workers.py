"""Which worker runs a job: one spawned worker process for a one-GPU job (jobs/process.py), a
torchrun launch of num_gpus ranks for a data-parallel one (jobs/launcher.py). No torch here."""

from __future__ import annotations

from pathlib import Path

from lorastudio.config import TrainConfig
from lorastudio.jobs.launcher import TorchrunWorker
from lorastudio.jobs.process import JobWorker, WorkerProcess, WorkerTarget
from lorastudio.jobs.standby import StandbyProcess
from lorastudio.settings import Settings


def new_job_worker(
    job_id: str,
    generation: int,
    config: TrainConfig,
    settings: Settings,
    *,
    target: WorkerTarget,
    devices: tuple[int, ...],
    resume: Path | None,
    standby: StandbyProcess | None = None,
) -> JobWorker:
    """The (not yet started) worker of a job: `config` is the worker's config; `devices` the
    GPUs the arbiter reserved (a data-parallel job on the CPU, settings.cpu_data_parallel, runs
    gloo ranks instead); `target` the single worker's entry point; `resume` the checkpoint folder
    of a resumed run (None: a fresh run); `standby` a waiting standby worker a one-GPU job is
    handed (jobs/standby.py; None: a fresh process)."""
    if config.num_gpus > 1:
        return TorchrunWorker(
            job_id,
            generation,
            config,
            settings,
            devices=None if settings.cpu_data_parallel else devices,
            resume=resume,
        )
    return WorkerProcess(job_id, generation, config, settings, target, resume=resume, standby=standby)
