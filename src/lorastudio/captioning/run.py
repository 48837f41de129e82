"""Caption a dataset: plan, load the model once, caption image by image, report each.

Events (plain dicts, JSON-ready; the CLI prints them, the caption worker sends them to the job
service): caption_started {total, skipped, store, device, kohya_kept: the first skipped images
whose caption is a kohya .caption file only, and kohya_count, when any}, caption_progress {index, total,
file, caption, cut} ("cut": the model's text stopped at max_tokens, not at its end: written as
made, counted in the summary's "cut"), caption_failed {index, total, file, reason, model},
caption_kept {index, total, file, reason, counted, model} (without overwrite, an image given a
caption by hand while the job ran keeps it: "counted" when its caption_progress came first, a
metadata.jsonl row found at its rewrite; an image found captioned before the model is asked is
kept with no model call; "model": whether the model was asked for the image (caption_progress:
always), so the job's time left is the model-call images' rate, jobs/caption_job.py,
RELIABILITY 2052), and the summary (CaptionSummary) at the end. `file` is the image's name
("10_sks/a.png" in a kohya layout captioned in place: captioning/plan.py). `cancelled()` is
checked before each image: a stop ends the run between images, and since every write is atomic (captioning/targets.py) no caption file is ever half-written; the
captions of a metadata.jsonl store are written before the summary (captioning/targets.py
CaptionWriter: a fast model shares one rewrite among several), and a write that fails there
stops the run naming the captions not saved. A .txt write the folder refuses (read-only file
system, permission denied: FOLDER_WIDE_ERRNOS) stops the run too: every later image would be
captioned only to fail the same way.
A broken image (corrupt, unreadable, deleted meanwhile, a name the caption writer refuses: not
UTF-8) is named in the failures and skipped; the run goes on; so
is an image every training run refuses (data.images.probe_image: larger than max_image_pixels,
animated), checked from its header before it is decoded.
An image over MAX_PIXELS is shrunk to about that many pixels (same aspect) before the model sees
it: a caption needs no more, and Qwen2.5-VL's vision tokens grow with the pixels (a 24 MP photo
would cost ~30k tokens at its processor's default cap).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from lorastudio.captioning.options import MAX_LISTED_FAILURES, CaptionOptions, check_prompt
from lorastudio.captioning.plan import plan_captions
from lorastudio.captioning.source import CaptionerSource
from lorastudio.captioning.targets import (
    FOLDER_WIDE_ERRNOS,
    KEPT_REASON,
    CaptionWriter,
    clean_caption,
)
from lorastudio.data.images import load_rgb, probe_image
from lorastudio.errors import ConfigError, DatasetError, LorastudioError, NoSpaceLeft, WriteFailed
from lorastudio.settings import get_settings

Emit = Callable[[dict[str, Any]], None]
MAX_PIXELS = 1024 * 1024


def fit_pixels(image: Image.Image, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """`image`, or a copy shrunk (Lanczos, same aspect) to at most `max_pixels` pixels."""
    width, height = image.size
    if width * height <= max_pixels:
        return image
    scale = math.sqrt(max_pixels / (width * height))
    size = (max(1, int(width * scale)), max(1, int(height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)


@dataclass
class CaptionSummary:
    """captioned: (file, caption) written; skipped: files that kept their caption; failures:
    (file, reason); cancelled: the run was stopped before the end; cut: the captioned files whose
    model text stopped at max_tokens, not at its end (written as made, likely mid-sentence). `public()` (the summary
    event) counts the failures and lists the first MAX_LISTED_FAILURES (each also had its
    caption_failed event)."""

    captioned: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    cancelled: bool = False
    cut: list[str] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        return {
            "type": "caption_summary",
            "captioned": len(self.captioned),
            "cut": len(self.cut),
            "skipped": len(self.skipped),
            "failed": len(self.failures),
            "failures": [{"file": f, "reason": r} for f, r in self.failures[:MAX_LISTED_FAILURES]],
            "cancelled": self.cancelled,
        }


def _reason(err: Exception) -> str:
    """One image's failure in words: a DatasetError's first problem, a ConfigError's (the image's
    name the writers refuse: not UTF-8, not one file name), else the message."""
    if isinstance(err, DatasetError) and err.problems:
        return err.problems[0]
    if isinstance(err, ConfigError) and err.problems:
        return str(err.problems[0])
    return str(err)


def _kept_rows(summary: CaptionSummary, names: list[str], emit: Emit) -> None:
    """Images whose caption_progress was sent but whose metadata.jsonl row was not written, as
    they were captioned meanwhile (CaptionWriter.flush): skipped, each a caption_kept event
    ("counted": its progress was counted)."""
    if not names:
        return
    dropped = set(names)
    summary.captioned = [(f, c) for f, c in summary.captioned if f not in dropped]
    summary.cut = [f for f in summary.cut if f not in dropped]
    summary.skipped.extend(names)
    for name in names:
        emit({"type": "caption_kept", "file": name, "reason": KEPT_REASON, "counted": True})


def caption_dataset(
    folder: Path,
    source: CaptionerSource,
    options: CaptionOptions,
    emit: Emit,
    cancelled: Callable[[], bool] = lambda: False,
    token: str | None = None,
    gpu: int | None = None,
    max_image_pixels: int | None = None,
) -> CaptionSummary:
    """Caption the images of dataset `folder` per `options` with the model at `source`, on GPU
    `gpu` when given (device "cuda": exactly that one; the caption job's placement); an image
    over `max_image_pixels` (None: the settings') is refused as a run refuses it.
    Returns the summary (also emitted last). Raises ConfigError (a prompt the model cannot
    honour: options.check_prompt), DatasetError (the folder), ModelSourceError
    (the model cannot be loaded), NoSpaceLeft (the disk is full: the run stops), DatasetError
    (the folder or metadata.jsonl cannot be written: the run stops)."""
    from lorastudio.captioning.vlm import Captioner

    check_prompt(source.kind, options)
    max_pixels = max_image_pixels if max_image_pixels is not None else get_settings().max_image_pixels
    plan = plan_captions(folder, options.overwrite)
    summary = CaptionSummary(skipped=list(plan.skipped))
    # images kept for their kohya .caption, which a run of this dataset does not read (RELIABILITY 1944)
    kohya = (
        {"kohya_kept": plan.kohya_kept[:MAX_LISTED_FAILURES], "kohya_count": len(plan.kohya_kept)}
        if plan.kohya_kept
        else {}
    )
    if not plan.todo:
        emit(
            {
                "type": "caption_started",
                "total": 0,
                "skipped": len(plan.skipped),
                "store": plan.store,
                **kohya,
            }
        )
        emit(summary.public())
        return summary
    captioner = Captioner(source, options.device, token, gpu)
    total = len(plan.todo)
    emit(
        {
            "type": "caption_started",
            "total": total,
            "skipped": len(plan.skipped),
            "store": plan.store,
            "device": captioner.device,
            **kohya,
        }
    )
    writer = CaptionWriter(folder, plan.store, keep_new=not options.overwrite, plan=plan)
    try:
        for index, image in enumerate(plan.todo, start=1):
            if cancelled():
                summary.cancelled = True
                break
            name = plan.label(image)  # "10_sks/a.png" in a kohya layout captioned in place
            where = {"index": index, "total": total, "file": name}
            # given a caption since the plan: kept with no model call (RELIABILITY 2052)
            if writer.captioned_now(image):
                summary.skipped.append(name)
                emit(
                    {"type": "caption_kept", **where, "reason": KEPT_REASON, "counted": False, "model": False}
                )
                continue
            if (why := plan.refused.get(image)) is not None:  # several caption files (plan.py)
                summary.failures.append((name, why))
                emit({"type": "caption_failed", **where, "reason": why, "model": False})
                continue
            called = False  # whether the model was asked (the job's time left counts those images)
            try:
                probe_image(image, max_pixels)  # a run's refusals (oversized, animated), before decoding
                rgb = fit_pixels(load_rgb(image))
                called = True
                text = clean_caption(
                    captioner.caption(rgb, options.prompt, options.max_tokens), options.prefix
                )
                cut = bool(getattr(captioner, "cut", False))  # stopped at max_tokens (RELIABILITY 1941)
                written = writer.write(image, text)  # .txt: written now; metadata.jsonl: by flush_due / flush
            except (LorastudioError, ValueError, OSError) as err:
                if isinstance(err, NoSpaceLeft):
                    raise
                cause = err.__cause__ if isinstance(err, WriteFailed) else err  # errors.writing's
                if isinstance(cause, OSError) and cause.errno in FOLDER_WIDE_ERRNOS:  # not this image's
                    raise writer.unwritable(cause) from err
                reason = _reason(err).removeprefix(f"{image.name}: ")
                summary.failures.append((name, reason))
                emit({"type": "caption_failed", **where, "reason": reason, "model": called})
                continue
            if not written:  # captioned by hand meanwhile (no overwrite): kept
                summary.skipped.append(name)
                emit(
                    {"type": "caption_kept", **where, "reason": KEPT_REASON, "counted": False, "model": True}
                )
                continue
            summary.captioned.append((name, text))
            if cut:
                summary.cut.append(name)
            emit({"type": "caption_progress", **where, "caption": text, "cut": cut})
            # a failure to write metadata.jsonl stops the run (not one image's)
            _kept_rows(summary, writer.flush_due(), emit)
        _kept_rows(summary, writer.flush(), emit)
    except BaseException:
        with contextlib.suppress(LorastudioError, OSError):  # keep what was made; raise the cause
            writer.flush()
        raise
    finally:
        captioner.close()
    emit(summary.public())
    return summary
