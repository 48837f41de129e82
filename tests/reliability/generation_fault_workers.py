"""A generation worker target that runs into a memory limit, for the reliability suite only.

`rlimited_generation_worker` runs the real `generation_worker_main` in a real spawned child;
before each job whose prompt starts with OOM_PROMPT it caps the child's address space
(RLIMIT_AS) at its current size + LIMIT_HEADROOM_MB, so the pipeline's next large allocations
fail as they would on a machine without that memory. Other prompts run unlimited.
"""

from __future__ import annotations

import resource
from typing import Any

import lorastudio.jobs.generation_worker as worker
from lorastudio.jobs.generation_worker import GenerationJob, GenerationWorkerArgs, Resident

OOM_PROMPT = "[oom]"
LIMIT_HEADROOM_MB = 64


def _vm_size_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def rlimited_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    real_run_job = worker.run_job

    def run_job(resident: Resident, job: GenerationJob, *report: Any) -> tuple[Any, bool]:
        if job.prompt.startswith(OOM_PROMPT):
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (_vm_size_bytes() + LIMIT_HEADROOM_MB * 2**20, hard))
        return real_run_job(resident, job, *report)

    worker.run_job = run_job
    worker.generation_worker_main(args, conn)
