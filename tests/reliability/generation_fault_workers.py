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


STEPS_FILE_ENV = "LORASTUDIO_TEST_STEPS_FILE"
STEP_PAUSE_S = 0.2


def slow_steps_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    """The real worker whose renders take STEP_PAUSE_S more per denoising step and count their
    steps in the file named by $LORASTUDIO_TEST_STEPS_FILE (one line per step): a cancel's test
    sees how far a render went."""
    import os
    import time

    import lorastudio.generate as gen

    real = gen.generate_image
    steps_file = os.environ[STEPS_FILE_ENV]

    def generate_image(*a: Any, cancelled: Any = None, **kw: Any) -> Any:
        def after_step() -> bool:
            with open(steps_file, "a", encoding="ascii") as out:
                out.write("step\n")
            time.sleep(STEP_PAUSE_S)
            return bool(cancelled and cancelled())

        return real(*a, cancelled=after_step, **kw)

    gen.generate_image = generate_image
    worker.generation_worker_main(args, conn)


STAND_IN_OOM = "MemoryError: the stand-in worker's out of memory"


def stand_in_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    """The real worker's main loop (generation_worker_main: ready, jobs, replies, its exit codes)
    whose jobs load no pipeline and import no torch: a job's PNG is one flat colour of its size
    (the seed's), written as the real job writes it (`out_path`, its PNG text); an OOM_PROMPT job
    answers "oom" and the worker exits OOM_EXIT_CODE, as after a real MemoryError. For a test of
    what the server process does with a worker's replies (its imports), not of the pipeline."""
    from PIL import Image

    from lorastudio import json_read
    from lorastudio.lora.shared import shared_copy

    def run_job(resident: Resident, job: GenerationJob, report: Any = None, *rest: Any) -> tuple[Any, bool]:
        if job.prompt.startswith(OOM_PROMPT):
            return ("oom", STAND_IN_OOM), True
        if report is not None:
            report(("loaded", resident.key != job.key))
        resident.key = job.key
        image = Image.new("RGB", (job.width, job.height), (job.seed % 256, 0, 0))
        meta = {**json_read.loads(job.png_meta), "width": image.width, "height": image.height}
        image.save(job.out_path, format="PNG", pnginfo=worker.png_text(shared_copy(meta)))
        return ("ok", {"width": image.width, "height": image.height, "seconds": 0.0, "loaded": True}), False

    worker.run_job = run_job
    worker.generation_worker_main(args, conn)
