"""The latent cache's plan keeps each variant's rng as its bit generator's state, not a copy of
the Generator (RELIABILITY 2191): a deepcopy per variant cost ~0.4 ms and ~0.8 KB, 8 s of a
50,000-image preflight's plan. The state replays the very crop the plan drew."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from lorastudio.data.crop import crop_offset, resized_size
from lorastudio.data.latent_keys import plan_variants, replay_rng
from lorastudio.data.scan import scan_dataset


def test_the_plan_copies_no_generator_and_its_states_replay_each_crop(
    small_dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = scan_dataset(small_dataset, resolution=32, multiple=16).items
    cfg: Any = SimpleNamespace(
        cache_variants=3, random_flip=True, random_crop=True, control_resolution="target"
    )
    copies = 0
    real_deepcopy = copy.deepcopy

    def counted(obj: object, memo: Any = None) -> object:
        nonlocal copies
        copies += isinstance(obj, np.random.Generator)
        return real_deepcopy(obj, memo)

    monkeypatch.setattr(copy, "deepcopy", counted)
    rng = np.random.default_rng(7)
    plan = plan_variants(items, cfg, rng, {"family": "flux"})
    assert copies == 0  # the old code: one Generator copy a variant (12 here)
    assert sum(len(v) for v in plan) == 3 * len(items) == 12
    for item, variants in zip(items, plan, strict=True):
        resized = resized_size(item.width, item.height, item.bucket)
        for v in variants:
            assert v.rng_state is not None
            top, left = crop_offset(resized, item.bucket, random_crop=True, rng=replay_rng(v.rng_state))
            shown = resized[0] - left - item.bucket[0] if v.flip else left
            assert (top, shown) == v.crop_top_left  # the state before the draws: the same crop
    with pytest.raises(ValueError, match="bit generator"):
        replay_rng({"bit_generator": "Generator"})
