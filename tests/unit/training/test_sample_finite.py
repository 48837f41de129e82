"""A sample preview whose pixels come out NaN or infinite is not saved black: the round keeps the
other prompts' files and the run's warnings say which has none (RELIABILITY 1651)."""

from __future__ import annotations

from typing import Any

import numpy as np
from diffusers.image_processor import VaeImageProcessor

from lorastudio.training import samples
from lorastudio.training.loop import train
from lorastudio.training.sample_files import list_samples


class _Overflowing:
    """The run's sampling pipeline, but its second render's pixels are NaN (an overflowing LoRA):
    converted to the output type asked for as the pipeline converts them ("pil": NaN cast to 0)."""

    def __init__(self, pipe: Any):
        self._pipe = pipe
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        asked = kwargs.pop("output_type")
        out = self._pipe(output_type="np", **kwargs)
        if self.calls == 2:
            out.images = out.images * np.nan  # [1, H, W, 3]
        if asked == "pil":
            out.images = VaeImageProcessor.numpy_to_pil(out.images)  # what "pil" gives: black
        return out


def test_a_non_finite_preview_has_no_file_and_a_run_warning(make_config, monkeypatch):
    real = samples.sampling_pipeline
    monkeypatch.setattr(samples, "sampling_pipeline", lambda *args: _Overflowing(real(*args)))
    events: list = []
    cfg = make_config(sample_prompts=["a red circle", "a blue square"], sample_steps=1)
    result = train(cfg, events.append, device="cpu")  # completes: a preview is not the run's result
    run_dir = result.lora_path.parent
    assert [(f.step, f.index) for f in list_samples(run_dir)] == [(2, 0)]  # no black step-000002-1.png
    (ready,) = [e for e in events if e.type == "sample_ready"]
    assert ready.images == ["samples/step-000002-0.png"]
    warnings = [e.message for e in events if e.type == "warning"]
    assert len(warnings) == 1 and warnings[0].startswith("sample prompt 2 of step 2 has no preview: ")
    assert "not finite" in warnings[0]


def test_trackers_tag_a_preview_by_its_prompt_index_not_its_position():
    from pathlib import Path

    from lorastudio.training.trackers import _prompt_indexed

    paths = [
        Path("run/samples/step-000002-0.png"),
        Path("run/samples/step-000002-2.png"),
    ]  # prompt 1 has none
    assert [i for i, _ in _prompt_indexed(paths)] == [0, 2]
