"""The caption worker: a spawned child that captions one dataset and exits (the only server-side
place that imports the captioning model).

It dies with the server (jobs/worker.bind_to_parent), starts without secrets and gets the hub
token from its pickled settings, held in memory for the loaders' `token=` (jobs/childenv.give_hub_token,
when the model is a hub id; never in its environment). Every
event of captioning/run.py goes to the server through `events` (a multiprocessing queue), then a
final {"type": "caption_error", "error": class name, "message"} when it failed; `cancel` (a
multiprocessing event) is checked before each image.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.source import CaptionerSource
from lorastudio.errors import LorastudioError
from lorastudio.processes import exit_worker
from lorastudio.settings import Settings

CAPTION_ERROR = "caption_error"


@dataclass(frozen=True)
class CaptionWorkerArgs:
    """What the child needs (picklable): the dataset folder, the resolved model, the options
    (device already resolved by the service), the settings (the hub token) and, for device
    "cuda", the GPU index the service placed it on (jobs/caption_gpu.py; among the GPUs the
    server sees, which the child sees the same: it inherits CUDA_VISIBLE_DEVICES)."""

    parent_pid: int
    folder: str
    source: CaptionerSource
    options: CaptionOptions
    settings: Settings
    gpu: int | None = None


def caption_worker_main(args: CaptionWorkerArgs, events: Any, cancel: Any) -> None:
    """Child entry point (spawn target): caption, report, exit."""
    from lorastudio.jobs.childenv import drop_secrets, give_hub_token
    from lorastudio.jobs.worker import bind_to_parent, ignore_terminal_interrupt

    bind_to_parent(args.parent_pid)

    ignore_terminal_interrupt()  # the server stops its children itself
    drop_secrets(os.environ)
    give_hub_token(args.settings, args.source.source)
    code = 0
    try:
        from lorastudio.captioning.run import caption_dataset
        from lorastudio.families.base import quiet_loading

        quiet_loading()
        caption_dataset(
            Path(args.folder), args.source, args.options, events.put, cancel.is_set, gpu=args.gpu,
            max_image_pixels=args.settings.max_image_pixels,
        )  # fmt: skip
    except LorastudioError as err:
        events.put({"type": CAPTION_ERROR, "error": type(err).__name__, "message": str(err)})
        code = 1
    except Exception as err:  # noqa: BLE001 - any model failure is reported to the server, not lost
        from lorastudio.jobs.worker_log import print_failure

        print_failure("a caption job failed in its worker", err)  # the traceback, once (RELIABILITY 1901)
        events.put(
            {"type": CAPTION_ERROR, "error": type(err).__name__, "message": f"{type(err).__name__}: {err}"}
        )
        code = 1
    events.close()
    events.join_thread()  # the queue's feeder thread has handed every event over
    exit_worker(code)  # no interpreter teardown: frees the GPU at once (processes.exit_worker)
