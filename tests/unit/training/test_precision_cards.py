"""The engine's precision and attention checks on older and mixed GPUs (training/precision.py,
training/speed/attention.py): torch's answers are faked as torch gives them on such a card (the seam:
torch.cuda's queries), since this host has no GPU. On sm_75 (a T4, an RTX 2080 Ti) torch.cuda.is_bf16_supported() says True (a bf16 tensor
can be made: emulation) although no tensor core computes bf16 there."""

from __future__ import annotations

import pytest
import torch
from tests.two_cards import fake_two_cards

from lorastudio.errors import ConfigError
from lorastudio.training.planning.plan import plain_precision
from lorastudio.training.precision import pick_dtype, precision_problems


@pytest.fixture
def two_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_two_cards(monkeypatch)  # an RTX 3090 (cuda:0) and an RTX 2080 Ti (cuda:1)


@pytest.mark.usefixtures("two_cards")
def test_auto_is_fp32_and_bf16_is_refused_on_the_sm75_card_and_bf16_on_the_ampere_one() -> None:
    turing, ampere = torch.device("cuda:1"), torch.device("cuda:0")
    # the job service's preflight says fp32 for auto on sm_75 (jobs/hardware.precisions_for): so does the run
    assert pick_dtype("auto", turing) == torch.float32 and plain_precision(turing) == "fp32"
    assert pick_dtype("auto", ampere) == torch.bfloat16 and plain_precision(ampere) == "bf16"
    for precision in ("bf16", "int8", "nf4"):
        (problem,) = precision_problems(precision, turing)
        assert problem.field == "base_precision"
        assert "NVIDIA GeForce RTX 2080 Ti (compute capability 7.5, bf16 from 8.0)" in problem.message
        assert precision_problems(precision, ampere) == []
    with pytest.raises(ConfigError):
        pick_dtype("bf16", turing)
    assert pick_dtype("fp16", turing) == torch.float16  # what the card has


@pytest.mark.usefixtures("two_cards")
def test_an_attention_kernel_the_runs_own_card_lacks_is_refused_before_any_model_loads() -> None:
    from lorastudio.training.speed.attention import attention_problems

    turing, ampere = torch.device("cuda:1"), torch.device("cuda:0")
    for backend in ("cudnn", "flash"):  # torch would warn and run the next backend, not the one named
        (problem,) = attention_problems(backend, turing)
        assert "NVIDIA GeForce RTX 2080 Ti is 7.5: use 'auto' or 'efficient'" in problem.message
        assert attention_problems(backend, ampere) == []
    assert attention_problems("efficient", turing) == [] and attention_problems("auto", turing) == []


@pytest.mark.usefixtures("two_cards")
def test_auto_attention_on_a_card_without_cudnn_or_flash_is_the_efficient_kernel_by_its_name() -> None:
    from lorastudio.training.speed.attention import settled_choice

    shapes = [(1, 24, 4608, 128)]
    # fp16 on the sm_75 card: no probe (cuDNN's and flash's kernels start at sm80); the Ampere one probes
    choice = settled_choice("auto", torch.device("cuda:1"), torch.float16, shapes)
    assert choice is not None and choice.backend == "efficient"
    assert "NVIDIA GeForce RTX 2080 Ti (compute capability 7.5)" in str(choice.fallback_reason)
    assert settled_choice("auto", torch.device("cuda:0"), torch.bfloat16, shapes) is None
