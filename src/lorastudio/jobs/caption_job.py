"""One caption job's state (CaptionJob, its JSON snapshot) and the clean-up of what a killed
caption worker leaves (jobs/captioning.py runs the jobs). No torch, no HTTP."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorastudio.captioning.options import MAX_LISTED_FAILURES, CaptionOptions
from lorastudio.captioning.plan import KOHYA_CAPTION_SUFFIX, kohya_sub_folders
from lorastudio.jobs.caption_gpu import CaptionNeed
from lorastudio.jobs.dataset_claims import DatasetClaim

PREVIEW = 5  # captions kept in a job's snapshot (the first ones)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@dataclass
class CaptionJob:
    """The state of one caption job (see `snapshot`)."""

    id: str
    dataset: str
    folder: Path
    options: CaptionOptions
    device: str
    gpu: int | None = None  # the GPU index (among the server's) a "cuda" job runs on
    need: CaptionNeed | None = None  # the captioner's estimated GPU memory (a "cuda" job)
    beside: str | None = None  # the training job whose GPU this job shares (it fits beside)
    model_folder: Path | None = None  # the captioner's local folder (not deleted while running)
    status: str = "running"  # running | completed | failed | cancelled (a record: interrupted)
    total: int | None = None
    done: int = 0
    captioned: int = 0
    skipped: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    preview: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    cancel_reason: str | None = None
    created_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    cancel: Any = None  # the worker's multiprocessing Event
    thread: threading.Thread | None = None
    claim: DatasetClaim | None = None  # the dataset's write claim while the job runs
    recorder: Any = None  # its jobs/caption_records.CaptionRecorder (once it has started)
    cut_files: set[str] = field(default_factory=set)  # captions stopped at max_tokens (RELIABILITY 1941)
    clock: Callable[[], float] = time.monotonic  # the ETA's clock (tests: a fake one)
    kohya_kept: int = 0  # skipped images captioned only by a kohya .caption (RELIABILITY 1944)
    started_s: float | None = None  # the clock at caption_started (the model loaded)
    last_s: float | None = None  # the clock at the last image's event
    model_s: float = 0.0  # the time of the images the model was asked for (RELIABILITY 2052)
    model_n: int = 0  # how many images those are

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one event of captioning/run.py into the job's counts (the server's worker
        events, the CLI's own)."""
        kind = event.get("type")
        if kind == "caption_progress" or (
            kind in ("caption_failed", "caption_kept") and not event.get("counted")
        ):  # one image's event (a "counted" kept one undoes an image's progress: no image)
            self._time_image(kind == "caption_progress" or event.get("model", True) is not False)
        if kind == "caption_started":
            self.total, self.skipped = event["total"], event["skipped"]
            self.started_s = self.clock()
            self.kohya_kept = event.get("kohya_count", 0)
        elif kind == "caption_progress":
            self.done, self.captioned = self.done + 1, self.captioned + 1
            if event.get("cut"):
                self.cut_files.add(event["file"])
            if len(self.preview) < PREVIEW:
                self.preview.append({"file": event["file"], "caption": event["caption"]})
        elif kind == "caption_kept":  # captioned by hand meanwhile: kept (RELIABILITY 1940)
            self.skipped += 1
            if event.get("counted"):  # its caption_progress was folded in: undo it
                self.captioned = max(0, self.captioned - 1)
                self.cut_files.discard(event["file"])
                self.preview = [p for p in self.preview if p["file"] != event["file"]]
            else:
                self.done += 1
        elif kind == "caption_failed":
            self.done += 1
            self.failures.append({"file": event["file"], "reason": event["reason"]})

    def _time_image(self, model: bool) -> None:
        """Note the time since the last image's event (or the model's load) as one image's, and
        count it towards the rate when the model was asked for the image (`model`)."""
        now = self.clock()
        since = self.last_s if self.last_s is not None else self.started_s
        if model and since is not None:
            self.model_s += now - since
            self.model_n += 1
        self.last_s = now

    def eta_s(self) -> float | None:
        """Seconds left (RELIABILITY 1942), at the rate of the images the model was asked for
        (RELIABILITY 2052: an image kept or failed with no model call takes next to nothing, and
        weighed alike it made the estimate read short), times the images left (each assumed to
        need the model): None until such an image is done, and once the job has ended."""
        if self.status != "running" or not self.total or not self.model_n:
            return None
        if not 0 < self.done < self.total:
            return None
        return round(self.model_s / self.model_n * (self.total - self.done), 1)

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "dataset": self.dataset,
            "model": self.options.model,
            "device": self.device,
            "gpu": self.gpu,
            "beside_training": self.beside,
            "prefix": self.options.prefix,
            "prompt": self.options.prompt,  # None: the model's default (RELIABILITY 1943)
            "max_tokens": self.options.max_tokens,
            "overwrite": self.options.overwrite,
            "status": self.status,
            "total": self.total,
            "done": self.done,
            "captioned": self.captioned,
            "cut": len(self.cut_files),
            "eta_s": self.eta_s(),
            "skipped": self.skipped,
            "kohya_kept": self.kohya_kept,
            "failed": len(self.failures),
            "failures": self.failures[:MAX_LISTED_FAILURES],  # the first; each is an event too
            "preview": list(self.preview),
            "error": self.error,
            "cancel_reason": self.cancel_reason,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
        }


def remove_staged(folder: Path) -> None:
    """Remove the hidden staged caption files a killed worker left (data.writes.staged_write's
    `.<name>.<hex>.tmp`): the real caption files are old or new, never half-written. A kohya
    layout captioned in place (captioning/plan.py) stages beside the images of its folders:
    theirs (`.txt` / `.caption`) go too."""
    subs = kohya_sub_folders(folder) or []
    for where in (folder, *subs):
        for path in where.glob(".*.tmp"):
            name = path.name[1:].rsplit(".", 2)[0]
            if name.lower().endswith((".txt", KOHYA_CAPTION_SUFFIX)) or (
                where == folder and name == "metadata.jsonl"
            ):
                path.unlink(missing_ok=True)
