"""A caption whose model text stopped at max_tokens (not at the model's end token) is said: in
its progress event, the summary, the job's snapshot and the CLI's lines (RELIABILITY 1941)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.run import caption_dataset
from lorastudio.captioning.source import resolve_captioner
from lorastudio.cli.caption_cmd import _print_event
from lorastudio.jobs.caption_job import CaptionJob
from lorastudio.settings import get_settings


def test_cut_is_said_only_when_the_text_stopped_at_max_tokens(tiny_vlm: Path) -> None:
    from lorastudio.captioning.vlm import Captioner

    captioner = Captioner(resolve_captioner(get_settings(), str(tiny_vlm)), "cpu")
    image = Image.new("RGB", (64, 48), (200, 30, 30))
    text = captioner.caption(image, None, 3)  # the random model never says its end in 3 tokens
    assert text and captioner.cut and captioner.stop_ids
    real_generate, stop = captioner.model.generate, min(captioner.stop_ids)

    def ends_itself(**kwargs: Any) -> torch.Tensor:  # the model's text, then its end token: [1, L]
        made = real_generate(**{**kwargs, "max_new_tokens": 2})
        return torch.cat([made, torch.tensor([[stop]])], dim=1)

    captioner.model.generate = ends_itself
    assert captioner.caption(image, None, 3) and not captioner.cut  # 3 tokens, the last its end
    captioner.close()


def test_cut_captions_are_counted_and_printed(
    tiny_vlm: Path, make_dataset: Callable[..., Path], capsys: Any
) -> None:
    folder = make_dataset(captions={"red": "a red card"})
    events: list[dict[str, Any]] = []
    options = CaptionOptions(model=str(tiny_vlm), max_tokens=3, device="cpu")
    summary = caption_dataset(
        folder, resolve_captioner(get_settings(), options.model), options, events.append
    )
    progress = [e for e in events if e["type"] == "caption_progress"]
    assert len(progress) == 3 and all(e["cut"] for e in progress)
    assert summary.cut == ["blue.png", "green.png", "white.png"] and events[-1]["cut"] == 3
    job = CaptionJob(id="a1", dataset="ds", folder=folder, options=options, device="cpu")
    for event in events:
        job.apply(event)
        _print_event(event)
    assert job.snapshot()["cut"] == 3
    out = capsys.readouterr().out
    assert out.count("(cut at --max-tokens)") == 3
    assert "3 caption(s) stopped at --max-tokens" in out
