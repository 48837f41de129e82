"""The maths audit (session 28): the training noise levels follow their definitions as
distributions, not only in their moments (test_noise.py): a Kolmogorov-Smirnov statistic over
20,000 seeded draws of FlowObjective.sigmas (sampling, then the family's shift) against the
closed-form CDF of each definition, below the 1 % critical value 1.63 / sqrt(n):
  - uniform: F(x) = x;
  - logit_normal (SD3's): F(x) = Phi((logit(x) - mean) / std);
  - sigmoid (the standard logistic-normal): F(x) = Phi(logit(x));
  - a static shift s (Z-Image's 3.0, flow_shift): sigma = s u / (1 + (s - 1) u), so
    F(x) = F_u(x / (s - (s - 1) x));
  - the dynamic exponential shift (FlowMatchEulerDiscreteScheduler.time_shift at calculate_shift's
    mu): sigma = e^mu / (e^mu + 1/u - 1), so F(x) = F_u(1 / (1 + e^mu (1/x - 1)));
and DDPM's integer timesteps uniform on [0, T)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lorastudio import families
from lorastudio.training.noise import DdpmObjective, FlowObjective

N = 20_000
CRITICAL = 1.63 / math.sqrt(N)  # KS, alpha = 0.01
QWEN_SCHEDULER = {  # Qwen-Image's scheduler config (the dynamic, exponential shift)
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 0.9,
    "base_image_seq_len": 256,
    "max_image_seq_len": 8192,
    "time_shift_type": "exponential",
}


def _phi(z: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(z / math.sqrt(2)))


def _sampled_cdf(sampling: str, mean: float, std: float):
    """The CDF of the sampled u of each timestep_sampling."""
    if sampling == "uniform":
        return lambda x: x
    if sampling == "logit_normal":
        return lambda x: _phi((torch.logit(x) - mean) / std)
    return lambda x: _phi(torch.logit(x))


def _ks(draws: torch.Tensor, cdf) -> float:
    x = torch.sort(draws.double()).values
    f = cdf(x)
    n = len(x)
    above = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    below = f - torch.arange(0, n, dtype=torch.float64) / n
    return float(torch.maximum(above, below).max())


def _sigmas(family: str, sampling: str, scheduler: dict, flow_shift=None, hw=(64, 64)) -> torch.Tensor:
    cfg = SimpleNamespace(timestep_sampling=sampling, logit_mean=0.4, logit_std=1.3, flow_shift=flow_shift)
    objective = FlowObjective(families.get(family), cfg, scheduler)
    return objective.sigmas(N, hw, torch.Generator().manual_seed(7))


@pytest.mark.parametrize("sampling", ["uniform", "logit_normal", "sigmoid"])
def test_sampled_and_shifted_sigmas_follow_their_definitions(sampling):
    base = _sampled_cdf(sampling, 0.4, 1.3)
    # FLUX.1: the sampled levels as they are
    assert _ks(_sigmas("flux", sampling, {}), base) < CRITICAL
    # Z-Image: its scheduler's static shift 3
    s = 3.0
    static = _sigmas("z-image", sampling, {"shift": s})
    assert _ks(static, lambda x: base(x / (s - (s - 1) * x))) < CRITICAL
    assert _ks(static, base) > 10 * CRITICAL  # the shift is there (the test can tell)
    # Qwen-Image at 1024 px (128 x 128 latent cells, 64 x 64 tokens): the dynamic exponential shift
    tokens = 64 * 64
    m = (0.9 - 0.5) / (8192 - 256)
    mu = tokens * m + 0.5 - m * 256
    dynamic = _sigmas("qwen-image", sampling, QWEN_SCHEDULER, hw=(128, 128))
    assert _ks(dynamic, lambda x: base(1 / (1 + math.exp(mu) * (1 / x - 1)))) < CRITICAL
    # flow_shift overrides the family's own
    assert (
        _ks(_sigmas("qwen-image", sampling, QWEN_SCHEDULER, flow_shift=2.0), lambda x: base(x / (2 - x)))
        < CRITICAL
    )


def test_ddpm_timesteps_are_uniform_integers():
    objective = DdpmObjective({"num_train_timesteps": 1000, "beta_schedule": "scaled_linear"}, None)
    batch = objective.noise(torch.zeros(N, 1, 1, 1), torch.Generator().manual_seed(3))
    t = batch.noise_level
    assert int(t.min()) == 0 and int(t.max()) == 999
    assert _ks(t.double() + 0.5, lambda x: x / 1000) < CRITICAL  # mid-bin against U[0, T)
