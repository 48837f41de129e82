"""One set of generation defaults (RELIABILITY 1820): a request that names no steps or size takes
the family's, the same numbers from POST /api/generate, `lorastudio generate` and the web's
Generate screen (which reads them from /api/info's families)."""

from __future__ import annotations

import pytest

from lorastudio import families
from lorastudio.api.routes.generate import request_of
from lorastudio.api.schemas import FamilyOut, GenerateBody
from lorastudio.jobs.generation_inputs import meta_of
from lorastudio.jobs.generation_process import UNKNOWN_STEPS


@pytest.mark.parametrize("name", families.names())
def test_a_request_without_steps_or_size_takes_the_familys(name: str) -> None:
    spec = families.get(name).spec
    req = request_of(GenerateBody(family=name, base_model="m", prompt="p"))
    # the CLI's: --width/--height default to spec.generation_side, --steps to None (the flavour's)
    assert (req.width, req.height) == (spec.generation_side, spec.generation_side)
    assert req.steps is None  # generate_image: the family's for the base's flavour, not a fixed 20
    assert meta_of(req, name, ())["steps"] is None  # sent again: the same default
    given = request_of(GenerateBody(family=name, base_model="m", prompt="p", steps=3, width=64, height=32))
    assert (given.steps, given.width, given.height) == (3, 64, 32)


def test_the_web_reads_the_same_numbers_from_the_family() -> None:
    for fam in families.all_families():
        spec = fam.spec
        out = FamilyOut.model_validate({**spec.public(), "refuses": [], "precisions": []})
        assert out.generation_side == spec.generation_side == spec.defaults["resolution"]
        assert out.generation_steps == spec.generation_defaults["num_inference_steps"]
        assert out.generation_steps <= UNKNOWN_STEPS  # the worker's time allowance of a default-steps job


def test_an_unknown_family_is_left_to_the_checks() -> None:
    req = request_of(GenerateBody(family="nope", base_model="m", prompt="p"))
    assert (req.family, req.width, req.steps) == ("nope", 1024, None)
