"""A caption worker target that stands in for a GPU model (this host has none): it runs in a
real spawned child, writes real captions with the real atomic writer (captioning/targets.py)
and sends the real event sequence, slowly, honouring the cancel event between images."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from lorastudio.captioning.run import CaptionSummary
from lorastudio.captioning.targets import plan_captions, store_caption
from lorastudio.jobs.caption_worker import CaptionWorkerArgs
from lorastudio.jobs.worker import bind_to_parent

SECONDS_PER_IMAGE = 0.4


def slow_fake_captioner(args: CaptionWorkerArgs, events: Any, cancel: Any) -> None:
    bind_to_parent(args.parent_pid)
    folder = Path(args.folder)
    plan = plan_captions(folder, args.options.overwrite)
    summary = CaptionSummary(skipped=plan.skipped)
    total = len(plan.todo)
    events.put({"type": "caption_started", "total": total, "skipped": len(plan.skipped), "store": plan.store})
    for index, image in enumerate(plan.todo, start=1):
        if cancel.is_set():
            summary.cancelled = True
            break
        time.sleep(SECONDS_PER_IMAGE)
        text = f"fake caption of {image.stem} on {args.options.device}"
        store_caption(folder, image, text, plan.store)
        summary.captioned.append((image.name, text))
        events.put(
            {"type": "caption_progress", "index": index, "total": total, "file": image.name, "caption": text}
        )
    events.put(summary.public())
    events.close()
    events.join_thread()
    os._exit(0)
