"""A generation worker for the slow declared-statuses test (test_api_declared_statuses_slow.py,
RELIABILITY 1870): the real worker (generation_worker_main, its real `run_job` with its error
replies and its PNG write under `writing`) whose engine's three calls are stand-ins (no torch, no model), so a
job's prompt picks what its pipeline does:

- FAIL_PROMPT: the render raises RuntimeError (the worker's "failed" reply: 500 GenerationFailed);
- HANG_PROMPT: the render sleeps, SIGTERM left to its default (504 GenerationTimedOut past the
  lowered allowance of the server's worker_timeout_scale);
- FULL_PROMPT: the render gives an image whose PNG write meets the kernel's ENOSPC (the real
  `writing` makes it NoSpaceLeft: 507, nothing kept);
- DIE_PROMPT: the worker exits mid-render (503 GenerationWorkerLost: the next request spawns
  a fresh one);
- anything else: a flat image, written as the real job writes it.
"""

from __future__ import annotations

import errno
import os
import sys
import time
import types
from typing import Any

from PIL import Image

import lorastudio
import lorastudio.jobs.generation_worker as worker
from lorastudio.jobs.generation_worker import GenerationWorkerArgs

FAIL_PROMPT, HANG_PROMPT, FULL_PROMPT, DIE_PROMPT = "[fail]", "[hang]", "[full]", "[die]"
STAND_IN_FAILURE = "the stand-in pipeline failed"


class _FullDiskImage:
    """An image whose every save meets a full disk (as PIL's write on one would)."""

    def __init__(self, width: int, height: int):
        self.width, self.height = width, height

    def save(self, path: str, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def _generate_image(pipe: Any, family: str, *, prompt: str, width: int, height: int, **kw: Any) -> Any:
    if prompt.startswith(FAIL_PROMPT):
        raise RuntimeError(STAND_IN_FAILURE)
    if prompt.startswith(HANG_PROMPT):
        time.sleep(3600)
    if prompt.startswith(DIE_PROMPT):
        os._exit(3)
    if prompt.startswith(FULL_PROMPT):
        return _FullDiskImage(width, height)
    return Image.new("RGB", (width, height), (10, 20, 30))


def status_generation_worker(args: GenerationWorkerArgs, conn: Any) -> None:
    """generation_worker_main with the stand-in engine (module docstring)."""
    engine = types.ModuleType("lorastudio.generate")  # run_job's `from lorastudio import generate`
    engine.load_pipeline = lambda *a, **kw: object()  # type: ignore[attr-defined]
    engine.apply_loras = lambda pipe, loras, cancelled=None: None  # type: ignore[attr-defined]
    engine.generate_image = _generate_image  # type: ignore[attr-defined]
    sys.modules["lorastudio.generate"] = engine  # the real package imports torch
    lorastudio.generate = engine  # type: ignore[attr-defined]
    worker.generation_worker_main(args, conn)
