"""Sample prompts given as objects (config_samples.SamplePrompt): each renders at its own size,
seed and guidance (the rest from the run), the plain prompts as before; bad values are refused
naming the entry."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lorastudio.config import parse_train_config, resolve_train_config
from lorastudio.errors import ConfigError
from lorastudio.training.loop import train


def test_a_sample_prompt_object_sets_its_own_size_seed_and_guidance(make_config):
    prompts = [
        "a red circle",
        {"prompt": "a red circle", "width": 48, "height": 32, "seed": 5},
        {"prompt": "a red circle", "guidance": 9.0},
        {"prompt": "a red circle", "seed": 0},  # the run's seed (sample_seed = 0): same as the plain one
    ]
    events: list = []
    result = train(make_config(sample_prompts=prompts, sample_steps=2), events.append, device="cpu")
    run_dir = result.lora_path.parent
    (ready,) = [e for e in events if e.type == "sample_ready"]
    images = [np.asarray(Image.open(run_dir / rel), dtype=np.int16) for rel in ready.images]
    assert [im.shape[:2] for im in images] == [(32, 32), (32, 48), (32, 32), (32, 32)]  # (height, width)
    np.testing.assert_array_equal(images[0], images[3])
    assert np.abs(images[0] - images[2]).max() > 0  # FLUX.1's guidance embedding at 9 instead of 3.5


def test_sample_prompt_objects_round_trip_and_bad_ones_are_refused(tiny_model, small_dataset):
    base = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(small_dataset)}
    cfg = resolve_train_config(
        parse_train_config({**base, "sample_prompts": ["a", {"prompt": "b", "seed": 2}]})
    )
    dumped = cfg.model_dump(mode="json")["sample_prompts"]
    assert dumped == [
        "a",
        {"prompt": "b", "controls": None, "width": None, "height": None, "seed": 2, "guidance": None},
    ]
    assert resolve_train_config(parse_train_config({**base, "sample_prompts": dumped})) == cfg
    for bad, field in (
        ({"prompt": "b", "width": 40}, "sample_prompts.0.width"),  # not a multiple of 16 for flux
        ({"prompt": "b", "colour": "red"}, "sample_prompts"),
        ({"prompt": "b", "seed": -1}, "sample_prompts"),
        ({"prompt": " "}, "sample_prompts"),
    ):
        with pytest.raises(ConfigError) as err:
            resolve_train_config(parse_train_config({**base, "sample_prompts": [bad]}))
        assert [p.field for p in err.value.problems][0].startswith(field), (bad, err.value.problems)
