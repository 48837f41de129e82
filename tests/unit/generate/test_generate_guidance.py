"""Guidance and the negative prompt as each family's spec declares them (FamilySpec.guidance,
negative_prompt): the contract holds for every registered pipeline; a negative prompt and a
guidance scale change a CFG family's image; a family without a negative prompt refuses one."""

from __future__ import annotations

import inspect

import diffusers
import numpy as np
import pytest

from lorastudio import families
from lorastudio.errors import ConfigError
from lorastudio.generate import generate_image, load_pipeline


@pytest.mark.parametrize("family", families.names())
def test_the_declared_guidance_keywords_exist_on_the_pipeline(family):
    spec = families.get(family).spec
    params = inspect.signature(getattr(diffusers, spec.pipeline_class).__call__).parameters
    assert spec.guidance_kwarg in params
    assert ("negative_prompt" in params) if spec.negative_prompt else True
    public = spec.public()
    assert public["guidance_default"] == spec.generation_defaults.get(spec.guidance_kwarg)
    if spec.guidance == "embedded":
        assert not spec.negative_prompt  # one pass: nothing to steer away from


def test_negative_prompt_and_guidance_change_an_sdxl_image(tiny_model):
    pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")

    def image(**kw):
        out = generate_image(pipe, "sdxl", prompt="a red circle", seed=1, steps=2, width=64, height=64, **kw)
        return np.asarray(out, dtype=np.int16)

    plain = image(guidance=5.0)
    np.testing.assert_array_equal(plain, image(guidance=5.0))
    assert np.abs(plain - image(guidance=5.0, negative_prompt="blue")).max() > 0
    assert np.abs(plain - image(guidance=9.0)).max() > 0


def test_a_family_without_a_negative_prompt_refuses_one(tiny_model):
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    with pytest.raises(ConfigError) as err:
        generate_image(pipe, "flux", prompt="x", seed=0, steps=1, width=32, height=32, negative_prompt="y")
    assert [p.field for p in err.value.problems] == ["negative_prompt"]
