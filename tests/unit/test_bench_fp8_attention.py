"""bench/fp8_attention.py's scaling (the cuDNN graphs themselves need a Hopper GPU and the
cuDNN frontend: bench/probe_fp8_attention.py measures them there, RESULTS.md note 22)."""

from __future__ import annotations

import pytest
import torch
from bench import fp8_attention as fa8

pytestmark = pytest.mark.slow  # the GPU bench harness on the CPU (bench/, not the product)


def test_quantize_maps_the_largest_magnitude_to_the_format_maximum_and_round_trips():
    x = torch.randn(2, 3, 64, 16, generator=torch.Generator().manual_seed(0)) * 0.01  # [B,H,S,D]
    for dtype, fmax, precision in ((torch.float8_e4m3fn, 448.0, 2**-3), (torch.float8_e5m2, 57344.0, 2**-2)):
        x8, descale = fa8.quantize(x, dtype)
        assert x8.dtype == dtype and descale.shape == (1, 1, 1, 1)
        assert x8.float().abs().max() == fmax  # the amax element lands exactly on the maximum
        back = x8.float() * descale
        big = x.abs() > x.abs().max() / 8  # normal range: relative error within the mantissa step
        assert ((back - x).abs()[big] <= precision * x.abs()[big]).all()


def test_the_dp_bound_holds_for_every_score_gradient():
    gen = torch.Generator().manual_seed(1)
    grad = torch.randn(1, 2, 32, 16, generator=gen)  # dO [B,H,S,D]
    v = torch.randn(1, 2, 32, 16, generator=gen) * 3  # V [B,H,S,D]
    grad[0, 1, 5] *= 40  # one large row: the bound must follow it
    dp = grad @ v.transpose(-1, -2)  # dP = dO V^T [B,H,S,S]
    bound = fa8._row_norm_max(grad) * fa8._row_norm_max(v)
    assert dp.abs().max() <= bound
    assert dp.abs().max() > bound / 20  # and it is not vacuous on data like this
