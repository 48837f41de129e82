"""Generation's default dtype on older and mixed GPUs (generate/pipeline.py): the same rule as
training's `base_precision: auto` (training/precision.bf16_capable). torch's answers are faked as
on a box of an RTX 3090 (cuda:0) and an RTX 2080 Ti (cuda:1, sm_75), since this host has no GPU:
there torch.cuda.is_bf16_supported() says True (emulated bf16) and asks the current device."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tests.two_cards import fake_two_cards


@pytest.fixture
def two_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_two_cards(monkeypatch)  # an RTX 3090 (cuda:0) and an RTX 2080 Ti (cuda:1)


@pytest.mark.usefixtures("two_cards")
def test_generation_loads_in_fp32_on_the_sm75_card_and_bf16_on_the_ampere_one_as_training_does(
    tiny_model: Callable[[str], Path],
) -> None:
    from lorastudio.generate.pipeline import _default_dtype, _load
    from lorastudio.training.precision import pick_dtype

    pipe, dev = _load(str(tiny_model("flux")), "flux", None, None, "cuda:1", None, None)  # not yet moved
    assert dev == torch.device("cuda:1") and pipe.transformer.dtype == torch.float32  # not emulated bf16
    assert _default_dtype(torch.device("cuda:0")) == torch.bfloat16  # the Ampere card computes bf16
    for device in ("cuda:1", "cuda:0"):  # the rule training's auto takes on each card
        assert _default_dtype(torch.device(device)) == pick_dtype("auto", torch.device(device))
