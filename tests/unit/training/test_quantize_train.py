"""Whole train() runs on a quantised (int8 / nf4) frozen base (training/planning/quantize.py), split from
test_quantize.py: the runs stay close to their bf16 runs and their LoRA loads on the plain
pipeline; a quantised run resumes exactly. Tolerances: see test_quantize.py's docstring (a
3-step train() run vs its bf16 run: every loss within 1% (int8) / 2.5% (nf4))."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lorastudio import families
from lorastudio.errors import ConfigError
from lorastudio.generate import generate_image, load_pipeline
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.planning.quantize import (
    QuantisedLinear,
)

TRAIN_LOSS_TOLERANCE = {"int8": 0.01, "nf4": 0.025}


def _image(pipe: Any, family: str) -> np.ndarray:
    size = max(32, 2 * families.get(family).spec.resolution_multiple)
    extra = (
        {"max_sequence_length": 16} if "max_sequence_length" in families.get(family).spec.supports else None
    )
    img = generate_image(
        pipe, family, prompt="a red circle", seed=0, steps=2, width=size, height=size, extra=extra
    )
    return np.asarray(img, dtype=np.float32)


@pytest.mark.parametrize("family", ["flux", "sdxl", "z-image"])
def test_quantised_train_runs_stay_close_to_bf16_and_their_lora_loads_on_the_plain_pipeline(
    family, make_config, tiny_model
):
    run = {"steps": 3, "learning_rate": 5e-2}
    ref = train(
        make_config(family, output_name="bf16", base_precision="bf16", **run), [].append, device="cpu"
    )
    for precision in ("int8", "nf4"):
        events: list = []
        cfg = make_config(  # a 2-step preview: that it renders on the quantised base is the check
            family,
            output_name=precision,
            base_precision=precision,
            sample_prompts=["a red circle"],
            sample_steps=2,
            **run,
        )
        result = train(cfg, events.append, device="cpu", return_denoiser=True)
        (plan,) = [e for e in events if e.type == "plan_chosen"]
        assert plan.base_precision == precision
        kept = family == "z-image" and precision == "nf4"  # its 85-wide MLPs (see above)
        assert plan.fallbacks == (
            [
                f"{precision}: 12 of 31 block linears kept in bf16 (size not a multiple of the 64-weight nf4 block: 12)"
            ]
            if kept
            else []
        )
        assert result.steps_run == 3 and any(
            isinstance(m, QuantisedLinear) for m in result.denoiser.modules()
        )
        for got, want in zip(result.losses, ref.losses, strict=True):
            assert got == pytest.approx(want, rel=TRAIN_LOSS_TOLERANCE[precision]), (
                precision,
                result.losses,
                ref.losses,
            )
        assert [e.step for e in events if e.type == "sample_ready"] == [3]  # previews render on it
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    base = _image(pipe, family)
    pipe.load_lora_weights(str(result.lora_path))  # the nf4 run's LoRA, plain fp32 base
    assert np.abs(_image(pipe, family) - base).mean() > 0.5


def test_a_quantised_run_resumes_exactly(make_config):
    settings = {"base_precision": "nf4", "steps": 3}
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done else None

    train(make_config(output_name="part", **settings), events.append, stop, device="cpu")
    resumed_events: list = []
    resumed = train(
        make_config(output_name="part", **settings),
        resumed_events.append,
        device="cpu",
        resume=get_settings().outputs_dir / "part",
    )
    assert resumed.resumed_from == 1 and resumed.losses == full.losses
    (plan,) = [e for e in resumed_events if e.type == "plan_chosen"]
    assert plan.base_precision == "nf4" and plan.decided_by == "checkpoint"
    # the precision is part of the identity (steps=4: a finished run is only resumed to train longer)
    with pytest.raises(ConfigError, match="base_precision"):
        train(make_config(output_name="part", base_precision="int8", steps=4), [].append, device="cpu",
              resume=get_settings().outputs_dir / "part")  # fmt: skip
