"""Where a budgeted run encodes its texts (training/inputs/conditioning.py `encoder_placement`): on the
training device when the text encoders fit the memory budget, else on the CPU with the reason —
so a Qwen-Image run (a 7B text encoder, ~16.6 GB in bf16) under a 16 GB budget never exceeds it."""

from __future__ import annotations

import torch

from lorastudio.training.inputs.conditioning import ENCODER_BUDGET_SHARE, encoder_bytes, encoder_placement

GIB = 1024**3
CUDA = torch.device("cuda")


def test_encoders_that_fit_the_budget_stay_on_the_gpu():
    assert encoder_placement(int(9.5 * GIB), CUDA, 16.0) == (CUDA, None)


def test_encoders_over_the_budget_encode_on_the_cpu_with_the_reason():
    device, note = encoder_placement(int(16.6 * GIB), CUDA, 16.0)
    assert device == torch.device("cpu")
    assert note is not None and "16.6 GiB" in note and "16 GB memory budget" in note and "CPU" in note


def test_the_share_of_the_budget_is_the_bound():
    budget = 10.0
    edge = int(ENCODER_BUDGET_SHARE * budget * GIB)
    assert encoder_placement(edge, CUDA, budget)[0] == CUDA
    assert encoder_placement(edge + 1, CUDA, budget)[0] == torch.device("cpu")


def test_without_a_budget_or_off_cuda_nothing_moves():
    assert encoder_placement(100 * GIB, CUDA, None) == (CUDA, None)
    cpu = torch.device("cpu")
    assert encoder_placement(100 * GIB, cpu, 1.0) == (cpu, None)


def test_the_encoder_bytes_are_those_of_the_loaded_text_encoders(tiny_model):
    from lorastudio import families

    fam = families.get("flux")
    pipe = fam.load_text_encoders(str(tiny_model("flux")), None, torch.bfloat16, torch.device("cpu"))
    expected = sum(
        p.numel() * p.element_size()
        for name in ("text_encoder", "text_encoder_2")
        for p in getattr(pipe, name).parameters()
    )
    assert expected > 0 and encoder_bytes(pipe) >= expected
