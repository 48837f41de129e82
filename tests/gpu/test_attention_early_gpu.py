"""GPU: auto's attention probe started early with the real child (training/speed/attention_early.py):
it checks the kernels while this process works on the GPU, times them once released, stores
the result; the next run at the same shapes decides from the cache without a child. Run with
`pytest -m gpu tests/gpu/test_attention_early_gpu.py -o addopts="" -s` (prints the seconds)."""

from __future__ import annotations

import time

import pytest
import torch

from lorastudio.training.speed.attention import probe_shapes
from lorastudio.training.speed.attention_early import start_choice
from lorastudio.training.speed.probe_cache import ProbeCache

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
DEV = torch.device("cuda")


def test_the_early_probe_works_beside_the_run_and_its_result_is_reused(tmp_path):
    shapes = probe_shapes({"num_attention_heads": 24, "attention_head_dim": 128}, 4096, 512, 1)  # FLUX.1
    cache = ProbeCache(tmp_path / "probes")
    t0 = time.monotonic()
    pending = start_choice("auto", DEV, torch.bfloat16, shapes, False, cache)
    assert pending.running is not None
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    for _ in range(200):  # the run's own work meanwhile (~1-2 s of matmuls)
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    busy = time.monotonic() - t0
    joined = time.monotonic()
    choice = pending.result(torch.bfloat16, shapes)
    done = time.monotonic()
    print(
        f"early probe: {choice}; own work {busy:.1f} s, then waited {done - joined:.1f} s ({done - t0:.1f} s in all)"
    )
    assert choice.backend in ("cudnn", "fa4") and choice.fallback_reason is None
    assert len(list((tmp_path / "probes").glob("*.json"))) == 1
    t1 = time.monotonic()
    again = start_choice("auto", DEV, torch.bfloat16, shapes, False, cache)
    assert again.running is None and again.decided == choice
    print(f"from the cache in {time.monotonic() - t1:.2f} s")
