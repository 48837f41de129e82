"""Generate's control_resolution (RELIABILITY 1490): a run's rule for its references, so that a
Qwen-Image-Edit preview (encoded at the run's size) renders again. The API carries it to the
worker and records it with the image; it is refused for a family without references, without
references (it would size nothing), and outside the run setting's values, before any work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lorastudio.api.routes.generate import request_of
from lorastudio.api.schemas import GenerateBody
from lorastudio.generation_rules import control_resolution_problems
from lorastudio.jobs.generation_inputs import meta_of


def test_control_resolution_is_refused_where_it_would_size_nothing() -> None:
    assert control_resolution_problems(None, "flux", 0) == []
    assert control_resolution_problems(64, "qwen-image-edit", 1) == []
    assert control_resolution_problems("target", "flux-kontext", 1) == []
    said = [(p.field, p.message) for p in control_resolution_problems("pipeline", "flux", 1)]
    assert said == [("control_resolution", "FLUX.1 takes no reference images")]
    said = [p.message for p in control_resolution_problems(64, "qwen-image-edit", 0)]
    assert said == ["sizes reference images: give one, or leave it out"]
    said = [p.message for p in control_resolution_problems(32, "qwen-image-edit", 1, prefix="--")]
    assert said == ["32: must be 'pipeline', 'target' or a side of 64-4096 pixels"]


def test_the_api_carries_it_to_the_request_and_the_gallery_record() -> None:
    body = GenerateBody(
        family="qwen-image-edit", base_model="m", prompt="p", references=["a" * 32], control_resolution=64
    )
    req = request_of(body)
    assert req.control_resolution == 64
    assert meta_of(req, "qwen-image-edit", ())["control_resolution"] == 64
    assert "control_resolution" not in meta_of(
        request_of(GenerateBody(family="flux", base_model="m", prompt="p")), "flux", ()
    )
    with pytest.raises(ValidationError):
        GenerateBody(family="qwen-image-edit", base_model="m", prompt="p", control_resolution=32)


@pytest.mark.parametrize("family", ["qwen-image-edit", "flux-kontext", "flux2"])
def test_a_side_past_the_per_image_budget_is_refused(family: str) -> None:
    """4096 (TrainConfig's bound) would encode each reference at 16.8 MP, a 512 px one upscaled
    (data/control_sizing.py), 4x the 2048 x 2048 an output image may have."""
    assert control_resolution_problems(2048, family, 1) == []
    said = [p.message for p in control_resolution_problems(2064, family, 1)]
    assert said == [
        "2064: each reference would be encoded at 2064x2064 = 4,260,096 pixels, over the generation"
        " budget of 4,194,304 pixels (2048x2048) per image"
    ]
    assert control_resolution_problems(4096, family, 2)
