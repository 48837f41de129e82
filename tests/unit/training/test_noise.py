"""Objectives: DDPM noising matches diffusers' scheduler, min-SNR weights, flow sigmas."""

from __future__ import annotations

import pytest
import torch
from diffusers import DDPMScheduler

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.errors import ModelSourceError
from lorastudio.training.noise import DdpmObjective, FlowObjective, min_snr_weights, sample_flow_sigmas

SDXL_SCHEDULER = {
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "num_train_timesteps": 1000,
}


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_ddpm_noising_and_target_match_the_diffusers_scheduler(prediction_type):
    config = {**SDXL_SCHEDULER, "prediction_type": prediction_type}
    objective = DdpmObjective(config, snr_gamma=None)
    x = torch.randn(6, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    batch = objective.noise(x, torch.Generator().manual_seed(7))
    # replay the same draws: timesteps first, then the noise
    gen = torch.Generator().manual_seed(7)
    t = torch.randint(0, 1000, (6,), generator=gen)
    eps = torch.randn(x.shape, generator=gen)
    sched = DDPMScheduler.from_config(config)
    assert torch.equal(batch.noise_level, t)
    torch.testing.assert_close(batch.noisy, sched.add_noise(x, eps, t))
    expected = eps if prediction_type == "epsilon" else sched.get_velocity(x, eps, t)
    torch.testing.assert_close(batch.target, expected)
    assert torch.equal(batch.weight, torch.ones(6))


def test_noise_offset_shifts_each_image_and_channel_by_one_drawn_constant():
    config = {**SDXL_SCHEDULER, "prediction_type": "epsilon"}
    x = torch.randn(16, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    plain = DdpmObjective(config, snr_gamma=None).noise(x, torch.Generator().manual_seed(7))
    offset = DdpmObjective(config, snr_gamma=None, noise_offset=0.1).noise(
        x, torch.Generator().manual_seed(7)
    )
    assert torch.equal(offset.noise_level, plain.noise_level)  # the same timesteps and base noise
    shift = offset.target - plain.target  # epsilon target = the noise: [B, C, h, w]
    per_channel = shift[:, :, :1, :1]  # [B, C, 1, 1]
    torch.testing.assert_close(shift, per_channel.expand_as(shift))  # constant over each image plane
    gen = torch.Generator().manual_seed(7)  # replay: timesteps, noise, then the offsets
    torch.randint(0, 1000, (16,), generator=gen), torch.randn(x.shape, generator=gen)
    torch.testing.assert_close(per_channel, 0.1 * torch.randn(16, 4, 1, 1, generator=gen))
    sched = DDPMScheduler.from_config(config)
    torch.testing.assert_close(offset.noisy, sched.add_noise(x, offset.target, offset.noise_level))


def test_min_snr_weights_follow_the_formula_for_each_target():
    snr = torch.tensor([0.5, 5.0, 50.0])
    eps_w = min_snr_weights(snr, 5.0, "epsilon")
    v_w = min_snr_weights(snr, 5.0, "v_prediction")
    torch.testing.assert_close(eps_w, torch.minimum(snr, torch.tensor(5.0)) / snr)
    torch.testing.assert_close(v_w, torch.minimum(snr, torch.tensor(5.0)) / (snr + 1))
    assert eps_w[0] == 1.0 and eps_w[2] < 1.0  # low-noise steps are down-weighted
    assert not torch.allclose(eps_w, v_w)


def test_ddpm_objective_applies_min_snr_from_alphas_cumprod():
    objective = DdpmObjective({**SDXL_SCHEDULER, "prediction_type": "epsilon"}, snr_gamma=2.0)
    batch = objective.noise(torch.zeros(64, 4, 2, 2), torch.Generator().manual_seed(0))
    ac = objective.alphas_cumprod[batch.noise_level]
    torch.testing.assert_close(batch.weight, min_snr_weights(ac / (1 - ac), 2.0, "epsilon"))
    assert (batch.weight < 1).any() and (batch.weight == 1).any()


def test_sample_prediction_is_refused():
    with pytest.raises(ModelSourceError, match="sample"):
        DdpmObjective({**SDXL_SCHEDULER, "prediction_type": "sample"}, None)


def test_flow_sigma_sampling_distributions():
    gen = torch.Generator().manual_seed(0)
    n = 20000
    ln = sample_flow_sigmas(n, "logit_normal", 0.5, 0.8, gen)
    logits = torch.logit(ln)
    assert abs(logits.mean() - 0.5) < 0.03 and abs(logits.std() - 0.8) < 0.03
    uni = sample_flow_sigmas(n, "uniform", 0.5, 0.8, gen)
    assert abs(uni.mean() - 0.5) < 0.01 and abs(uni.std() - (1 / 12) ** 0.5) < 0.01
    sig = sample_flow_sigmas(n, "sigmoid", 3.0, 5.0, gen)  # ignores logit_mean/std
    assert abs(torch.logit(sig).mean()) < 0.03 and abs(torch.logit(sig).std() - 1.0) < 0.03
    for s in (ln, uni, sig):
        assert (s > 0).all() and (s < 1).all()


def test_flow_objective_interpolates_and_targets_velocity():
    family = families.get("flux")
    cfg = TrainConfig(family="flux", base_model="a/b", data_dir="d", flow_shift=3.0)
    objective = FlowObjective(family, cfg, {"shift": 1.0, "use_dynamic_shifting": False})
    x = torch.randn(4, 16, 4, 4, generator=torch.Generator().manual_seed(3))
    batch = objective.noise(x, torch.Generator().manual_seed(5))
    gen = torch.Generator().manual_seed(5)
    u = sample_flow_sigmas(4, "logit_normal", 0.0, 1.0, gen)
    eps = torch.randn(x.shape, generator=gen)
    s = 3.0 * u / (1 + 2.0 * u)  # the static shift of flow_shift=3
    torch.testing.assert_close(batch.noise_level, s)
    sv = s.view(4, 1, 1, 1)
    torch.testing.assert_close(batch.noisy, (1 - sv) * x + sv * eps)
    torch.testing.assert_close(batch.target, eps - x)


def test_min_snr_is_finite_and_one_at_a_zero_terminal_snr_timestep():
    """A zero-terminal-SNR schedule (a single file's `ztsnr`) has snr 0 at its last timestep:
    the epsilon weight min(snr, gamma) / snr was 0 / 0 = NaN there (a NaN loss, a skipped step);
    its limit is 1. Elsewhere the weights are the formula's, bitwise."""
    config = {**SDXL_SCHEDULER, "prediction_type": "epsilon", "rescale_betas_zero_snr": True}
    objective = DdpmObjective(config, snr_gamma=5.0)
    assert objective.alphas_cumprod[-1] == 0  # diffusers' DDPMScheduler: exactly zero terminal SNR
    batch = objective.at_levels(
        torch.zeros(3, 4, 2, 2), torch.tensor([0.0, 0.5, 0.9999]), torch.ones(3, 4, 2, 2)
    )
    assert batch.noise_level.tolist() == [0, 500, 999]
    assert torch.isfinite(batch.weight).all() and batch.weight[2] == 1.0
    snr = torch.tensor([0.5, 5.0, 50.0, 1e-8])
    assert torch.equal(min_snr_weights(snr, 5.0, "epsilon"), torch.minimum(snr, torch.tensor(5.0)) / snr)
    v = DdpmObjective({**config, "prediction_type": "v_prediction"}, snr_gamma=5.0)
    assert (
        v.at_levels(torch.zeros(1, 4, 2, 2), torch.tensor([0.9999]), torch.ones(1, 4, 2, 2)).weight[0] == 0.0
    )
