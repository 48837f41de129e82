"""A data-parallel run started from a LoRA file (init_lora) on the CPU: in the session's gloo
launch (tests/ddp_launch.py, scenario "init-lora") every rank loads the file itself and holds
its weights at step 0, as one process loading it does, and the two ranks train the LoRA of one
process from it. Slow: its scenario adds a two-rank run to the launch."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from ddp_init import init_config, recorded_init
from ddp_launch import LORA_ATOL, LORA_RTOL, LOSS_RTOL
from lorastudio.training.loop import train


@pytest.mark.slow
def test_every_rank_starts_from_the_init_lora_file_and_trains_like_one(make_config, launched, tmp_path):
    init_file = launched.out / "init-lora.safetensors"
    start = tmp_path / "single-init.safetensors"
    with recorded_init(start):
        single = train(init_config(make_config, init_file, output_name="single"), [].append, device="cpu")
    expected = load_file(str(start))  # what one process holds just after loading the file
    assert any(float(v.abs().max()) > 1e-3 for k, v in expected.items() if "lora_B" in k)  # not a fresh LoRA
    for rank in range(2):
        held = load_file(str(launched.out / "init-lora" / f"init{rank}.safetensors"))
        assert sorted(held) == sorted(expected)
        for key, tensor in expected.items():  # the same load, bit for bit, on each rank
            torch.testing.assert_close(held[key], tensor, atol=0, rtol=0, msg=f"rank {rank}: {key}")
    ranks = launched.ranks("init-lora")
    for record in ranks:
        assert record["steps_run"] == 2
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    got, want = load_file(ranks[0]["lora_path"]), load_file(str(single.lora_path))
    assert sorted(got) == sorted(want)
    for key, tensor in want.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)
