"""training/speed/device_warmup.py off the GPU: nothing is started for a CPU run (tests/gpu has the CUDA side)."""

from __future__ import annotations

import inspect

import torch

from lorastudio.training import loop
from lorastudio.training.speed.device_warmup import warm_device


def test_a_cpu_run_starts_no_warm_up_thread():
    assert warm_device(torch.device("cpu")) is None


def test_the_loop_starts_the_warm_up_before_its_preflight():
    source = inspect.getsource(loop.train)
    assert source.index("warm_device(") < source.index("prepare_on_ranks(")
