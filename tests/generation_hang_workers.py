"""Generation worker targets that hang, for the timeout tests only (the production worker reads
no test switch). Each runs in a real spawned child.

- `silent_generation_worker` never says "ready" (it sleeps, bound to its parent).
- `hanging_generation_worker` runs the real `generation_worker_main`; a job whose prompt starts
  with HANG_LOAD_PROMPT hangs before its pipeline is reported loaded (as a stalled load would);
  one that starts with HANG_PROMPT loads the real pipeline, then hangs inside the engine's
  `generate_image` with SIGTERM ignored (as a wedged driver call would), so only SIGKILL ends it.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from lorastudio.jobs.generation_worker import GenerationJob, GenerationWorkerArgs, Resident

HANG_PROMPT = "[hang]"
HANG_LOAD_PROMPT = "[hang-load]"


def silent_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    from lorastudio.jobs.worker import bind_to_parent

    bind_to_parent(args.parent_pid)
    time.sleep(3600)


def hanging_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    import lorastudio.jobs.generation_worker as worker

    real_run_job = worker.run_job

    def run_job(resident: Resident, job: GenerationJob, *report: Any) -> tuple[Any, bool]:
        if job.prompt.startswith(HANG_LOAD_PROMPT):
            time.sleep(3600)
        import lorastudio.generate as gen  # the engine, imported by the job as the real worker does

        if not getattr(gen.generate_image, "hangs", False):
            gen.generate_image = _hanging(gen.generate_image)
        return real_run_job(resident, job, *report)

    worker.run_job = run_job
    worker.generation_worker_main(args, conn)


def _hanging(real_generate: Any) -> Any:
    def generate_image(pipe: Any, family: str, **kw: Any) -> Any:
        if str(kw.get("prompt", "")).startswith(HANG_PROMPT):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(3600)
        return real_generate(pipe, family, **kw)

    generate_image.hangs = True  # type: ignore[attr-defined]
    return generate_image


LOADS_FILE_ENV = "LORASTUDIO_TEST_LOADS_FILE"
LOAD_PAUSE_S = 0.5


def slow_load_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    """The real worker whose pipeline loads take LOAD_PAUSE_S more per component (diffusers'
    `load_sub_model`: text encoders, tokenizers, VAE, denoiser, scheduler), each named on a line
    of the file $LORASTUDIO_TEST_LOADS_FILE as it starts: a cancel's test sees how far a load went."""
    import os

    from diffusers.pipelines import pipeline_utils

    import lorastudio.jobs.generation_worker as worker

    real = pipeline_utils.load_sub_model
    loads_file = os.environ[LOADS_FILE_ENV]

    def load_sub_model(*a: Any, **kw: Any) -> Any:
        with open(loads_file, "a", encoding="ascii") as out:
            out.write(f"{kw.get('name')}\n")
        time.sleep(LOAD_PAUSE_S)
        return real(*a, **kw)

    pipeline_utils.load_sub_model = load_sub_model
    worker.generation_worker_main(args, conn)
