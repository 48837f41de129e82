"""A caption worker target that stands in for a GPU model (this host has none): it runs in a
real spawned child, writes real captions with the real atomic writer (captioning/targets.py)
and sends the real event sequence, slowly, honouring the cancel event between images."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from lorastudio.captioning.plan import plan_captions
from lorastudio.captioning.run import CaptionSummary
from lorastudio.captioning.targets import store_caption
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
        gpu = "" if args.gpu is None else f":{args.gpu}"  # the GPU the service placed it on
        text = f"fake caption of {image.stem} on {args.options.device}{gpu}"
        store_caption(folder, image, text, plan.store)
        summary.captioned.append((image.name, text))
        events.put(
            {"type": "caption_progress", "index": index, "total": total, "file": image.name, "caption": text}
        )
    events.put(summary.public())
    events.close()
    events.join_thread()
    os._exit(0)


def stuck_fake_captioner(args: CaptionWorkerArgs, events: Any, cancel: Any) -> None:
    """Writes one caption and a staged (half-written) one as if killed mid-write, reports the first,
    then hangs, ignoring the cancel (the service must kill it and remove the staged file)."""
    bind_to_parent(args.parent_pid)
    folder = Path(args.folder)
    plan = plan_captions(folder, args.options.overwrite)
    events.put({"type": "caption_started", "total": len(plan.todo), "skipped": 0, "store": plan.store})
    store_caption(folder, plan.todo[0], "the first caption", plan.store)
    (folder / f".{plan.todo[1].stem}.txt.0123abcd.tmp").write_text("half a capt", encoding="utf-8")
    events.put(
        {
            "type": "caption_progress",
            "index": 1,
            "total": len(plan.todo),
            "file": plan.todo[0].name,
            "caption": "x",
        }
    )
    while True:
        time.sleep(1)


def waiting_fake_captioner(args: CaptionWorkerArgs, events: Any, cancel: Any) -> None:
    """Starts, then writes nothing until cancelled (a job that runs as long as a test needs)."""
    bind_to_parent(args.parent_pid)
    plan = plan_captions(Path(args.folder), args.options.overwrite)
    events.put({"type": "caption_started", "total": len(plan.todo), "skipped": 0, "store": plan.store})
    while not cancel.wait(0.1):
        pass
    events.put(CaptionSummary(skipped=plan.skipped, cancelled=True).public())
    events.close()
    events.join_thread()
    os._exit(0)


def silent_fake_captioner(args: CaptionWorkerArgs, events: Any, cancel: Any) -> None:
    """Never reports its model loaded and ignores SIGTERM (as a wedged model load would)."""
    import signal

    bind_to_parent(args.parent_pid)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
