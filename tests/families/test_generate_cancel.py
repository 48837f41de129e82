"""A generation stops between denoising steps when it is cancelled, in every family: the
pipeline runs the steps before the cancel and no more, makes no image, and renders whole again
afterwards (generate.generate_image's `cancelled`, through the pipeline's callback_on_step_end).
Parametrized over families.names(): a new family is tested with no new test code."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tests.families.conftest import controls_for

from lorastudio import families
from lorastudio.errors import GenerationCancelled
from lorastudio.generate import generate_image, load_pipeline

STEPS = 5
CANCEL_AFTER = 2  # steps


def _extra(family: str) -> dict[str, Any] | None:
    supports = families.get(family).spec.supports
    return {"max_sequence_length": 16} if "max_sequence_length" in supports else None


@pytest.mark.parametrize("family", families.names())
def test_a_cancel_stops_the_render_between_steps(family, tiny_model, training_data):
    torch.set_num_threads(1)
    spec = families.get(family).spec
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    calls = [0]
    pipe.components[spec.denoiser].register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    data = training_data(family)
    caption = sorted(data.glob("*.txt"))[0]
    size = max(32, 2 * spec.resolution_multiple)
    kw = {
        "prompt": "a red circle",
        "seed": 0,
        "steps": STEPS,
        "width": size,
        "height": size,
        "extra": _extra(family),
        "controls": controls_for(family, data, caption),
    }
    generate_image(pipe, family, **kw)
    per_step, calls[0] = calls[0] / STEPS, 0  # 2 with real CFG

    asked = [0]

    def cancelled() -> bool:
        asked[0] += 1
        return asked[0] >= CANCEL_AFTER

    with pytest.raises(GenerationCancelled, match=f"after denoising step {CANCEL_AFTER}"):
        generate_image(pipe, family, cancelled=cancelled, **kw)
    assert calls[0] == CANCEL_AFTER * per_step, (family, calls[0], per_step)
    calls[0] = 0
    assert generate_image(pipe, family, cancelled=lambda: False, **kw).size == (size, size)
    assert calls[0] == STEPS * per_step
