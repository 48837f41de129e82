"""A caption job's time left is the rate of the images the model was asked for (RELIABILITY 2052),
and an image given a caption since the plan is kept before the model is asked. A fake captioner
on a fake clock (each model call 10 s of it): nothing timed, no model loaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from lorastudio.captioning import vlm
from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.run import caption_dataset
from lorastudio.captioning.source import CaptionerSource
from lorastudio.jobs.caption_job import CaptionJob


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_is_the_rate_of_the_images_the_model_was_asked_for(
    make_dataset: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate took every image alike: a job whose first images were kept or failed with no
    model call (next to no time) read "no time left", then far too little, until captioned ones
    weighed in. blue.png is captioned by hand once the job has planned (it is kept: before, the
    model was asked for it first), broken.png fails at its load; the three others cost 10 s each."""
    folder = make_dataset(broken=True)
    clock, asked = _Clock(), []

    class FakeCaptioner:
        def __init__(self, source: CaptionerSource, device: str, token: Any = None, gpu: Any = None) -> None:
            self.device, self.cut = "cpu", False
            (folder / "blue.txt").write_text("blue by hand\n", encoding="utf-8")  # the plan is made

        def caption(self, image: Image.Image, prompt: str | None, max_tokens: int) -> str:
            clock.now += 10.0
            asked.append(image.getpixel((0, 0)))
            return "a square"

        def close(self) -> None:
            pass

    monkeypatch.setattr(vlm, "Captioner", FakeCaptioner)
    options = CaptionOptions(model="fake", device="cpu")
    job = CaptionJob(id="ab12", dataset="ds", folder=folder, options=options, device="cpu", clock=clock)
    seen: list[tuple[str, float | None]] = []

    def emit(event: dict[str, Any]) -> None:
        job.apply(event)
        if event["type"] != "caption_started":
            seen.append((event.get("file", event["type"]), job.snapshot()["eta_s"]))

    source = CaptionerSource(source="fake", kind="qwen2_5_vl", revision=None, folder=None)
    summary = caption_dataset(folder, source, options, emit)
    assert [f for f, _ in summary.captioned] == ["green.png", "red.png", "white.png"]
    assert len(asked) == 3  # blue.png kept with no model call
    assert seen == [
        ("blue.png", None),  # no model-call image yet: unknown (before: 0 s left)
        ("broken.png", None),
        ("green.png", 20.0),  # 10 s an image, 2 left (before: 10 s / 3 images x 2 = 6.7)
        ("red.png", 10.0),
        ("white.png", None),  # done
        ("caption_summary", None),
    ]
    assert (job.done, job.captioned, job.skipped, len(job.failures)) == (5, 3, 1, 1)
