"""A step-distilled FLUX.2 klein checkpoint (model_index.json is_distilled = true) runs no
classifier-free guidance: Flux2KleinPipeline logs "Guidance scale ... is ignored" and renders
unguided. Before RELIABILITY 1562 a request's guidance of 7 there was taken and recorded, and
rendered the pixels of guidance 1 (max difference 0). Now generate_image refuses it naming why,
as it refuses a negative prompt at a scale that runs no guidance; the base checkpoint guides."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from lorastudio.errors import ConfigError
from lorastudio.generate import generate_image, load_pipeline

KW = {"prompt": "a red circle", "seed": 3, "steps": 2, "width": 32, "height": 32, "max_sequence_length": 16}


def test_a_guidance_a_distilled_klein_would_ignore_is_refused(tiny_model, tmp_path):
    distilled = tmp_path / "klein-distilled"
    shutil.copytree(tiny_model("flux2-klein"), distilled)
    index = json.loads((distilled / "model_index.json").read_text())
    (distilled / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    pipe = load_pipeline(str(distilled), "flux2-klein", device="cpu")
    with pytest.raises(ConfigError) as info:
        generate_image(pipe, "flux2-klein", guidance=7.0, **KW)  # before: guidance 1's image
    ((field, message),) = [(p.field, p.message) for p in info.value.problems]
    assert field == "guidance" and message.startswith(
        "7: Flux2KleinPipeline runs no classifier-free guidance for this checkpoint"
    )
    unguided = np.asarray(generate_image(pipe, "flux2-klein", **KW))  # its default: 1
    np.testing.assert_array_equal(
        np.asarray(generate_image(pipe, "flux2-klein", guidance=1.0, **KW)), unguided
    )
