"""Training objectives: how a clean latent batch becomes (noisy input, noise level, target,
per-sample loss weight). Two objectives cover every family:

- DDPM (SDXL): uniform integer timesteps, the scheduler's alphas_cumprod, epsilon or v target
  per the scheduler config, optional min-SNR-gamma weighting;
- rectified flow (FLUX.1, Qwen-Image, Z-Image): sigma sampled per cfg.timestep_sampling, then
  the family's shift hook; noisy = (1 - s) x + s eps, target eps - x.

For the Huber losses (training/losses.py) each objective also gives every sample its threshold
(`loss_c`), scheduled by that sample's noise level; it is computed on the CPU from the drawn
timesteps / sigmas, so no value is read back from the device.

All randomness comes from the caller's torch.Generator (CPU), so a run is reproducible on any
device. Arithmetic is fp32; `noisy` is cast to the training dtype at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ModelSourceError
from lorastudio.training.losses import LossSettings, huber_thresholds, loss_settings

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family


@dataclass(frozen=True)
class NoisedBatch:
    noisy: torch.Tensor  # [B, C, h, w] training dtype, on the latents' device
    noise_level: torch.Tensor  # [B] DDPM: int64 timesteps; flow: float32 sigmas in (0, 1)
    target: torch.Tensor  # [B, C, h, w] float32
    weight: torch.Tensor  # [B] float32 per-sample loss weight
    loss_c: torch.Tensor | None = None  # [B] float32 Huber threshold per sample (huber / smooth_l1 only)


def min_snr_weights(snr: torch.Tensor, gamma: float, prediction_type: str) -> torch.Tensor:
    """Min-SNR-gamma loss weights (Hang et al. 2023) for snr [B] >= 0: min(snr, gamma) / snr for an
    epsilon target, min(snr, gamma) / (snr + 1) for a v target.

    The epsilon weight is computed as min(1, gamma / snr), the same value (bitwise: both are 1
    where snr <= gamma, gamma / snr elsewhere) that stays defined at snr = 0: a zero-terminal-SNR
    schedule's last timestep (rescale_betas_zero_snr, a single file's `ztsnr` marker), where
    min(snr, gamma) / snr was 0 / 0 = NaN, a NaN loss and a skipped step about once per 1000
    samples. Its limit there is 1, SimpleTuner's weight where snr == 0."""
    if prediction_type == "v_prediction":
        clipped = torch.minimum(snr, torch.full_like(snr, gamma))  # [B]
        return clipped / (snr + 1)
    return torch.clamp(torch.full_like(snr, gamma) / snr, max=1.0)  # [B]; gamma / 0 = inf -> 1


def sample_flow_sigmas(
    n: int, sampling: str, logit_mean: float, logit_std: float, generator: torch.Generator
) -> torch.Tensor:
    """n sigmas in (0, 1), float32 [n]. logit_normal: sigmoid(N(logit_mean, logit_std));
    uniform: U(0, 1); sigmoid: sigmoid(N(0, 1)) (the standard logistic-normal, no parameters)."""
    if sampling == "uniform":
        u = torch.rand(n, generator=generator)
    elif sampling == "logit_normal":
        u = torch.sigmoid(logit_mean + logit_std * torch.randn(n, generator=generator))
    elif sampling == "sigmoid":
        u = torch.sigmoid(torch.randn(n, generator=generator))
    else:
        raise ValueError(f"unknown timestep sampling {sampling!r}")
    return u.clamp(1e-5, 1 - 1e-5)  # [n]


class DdpmObjective:
    """Epsilon / v-prediction DDPM objective built from the base model's scheduler config."""

    def __init__(
        self,
        scheduler_config: Mapping[str, Any],
        snr_gamma: float | None,
        noise_offset: float | None = None,
        loss: LossSettings | None = None,
    ):
        from diffusers import DDPMScheduler

        self.prediction_type = str(scheduler_config.get("prediction_type", "epsilon"))
        if self.prediction_type not in ("epsilon", "v_prediction"):
            raise ModelSourceError(
                f"the base model's scheduler predicts {self.prediction_type!r}; "
                "only epsilon and v_prediction can be trained"
            )
        from lorastudio.families.sdxl import is_edm

        if is_edm(scheduler_config):  # preflight refuses the base first (SDXLFamily.objective_problems)
            raise ModelSourceError(
                f"the base model's scheduler is {scheduler_config.get('_class_name')} (EDM); only the "
                "DDPM objective can be trained"
            )
        sched = DDPMScheduler.from_config(dict(scheduler_config))
        self.alphas_cumprod = sched.alphas_cumprod.float()  # [T]
        self.num_timesteps = int(sched.config.num_train_timesteps)
        self.snr_gamma = snr_gamma
        self.noise_offset = noise_offset
        self.loss = loss or LossSettings()

    def noise(self, latents: torch.Tensor, generator: torch.Generator) -> NoisedBatch:
        """latents [B,C,h,w] -> DDPM-noised batch with uniform integer timesteps. With a noise
        offset, each image and channel's noise is shifted by noise_offset x N(0, 1) (drawn after
        the noise itself, so runs without it draw exactly what they drew before)."""
        b, c = latents.shape[:2]
        t = torch.randint(0, self.num_timesteps, (b,), generator=generator)  # [B]
        eps = torch.randn(latents.shape, generator=generator)  # [B, C, h, w]
        if self.noise_offset is not None:
            eps = eps + self.noise_offset * torch.randn(b, c, 1, 1, generator=generator)  # [B, C, h, w]
        return self._mix(latents, t, eps.to(latents.device))

    def at_levels(self, latents: torch.Tensor, levels: torch.Tensor, eps: torch.Tensor) -> NoisedBatch:
        """The batch at fixed noise levels (the validation loss: training/validate.py): levels [B]
        in (0, 1) as quantiles of the schedule (t = floor(level x T)), eps [B,C,h,w] fp32 the
        given noise. Draws nothing."""
        t = (levels.float() * self.num_timesteps).long().clamp(0, self.num_timesteps - 1)  # [B]
        return self._mix(latents, t, eps.to(latents.device))

    def _mix(self, latents: torch.Tensor, t: torch.Tensor, eps: torch.Tensor) -> NoisedBatch:
        """noisy, target and weight of latents [B,C,h,w] at timesteps t [B] with noise eps."""
        b = latents.shape[0]
        ac = self.alphas_cumprod[t].to(latents.device).view(b, 1, 1, 1)  # [B, 1, 1, 1]
        x0 = latents.float()
        noisy = ac.sqrt() * x0 + (1 - ac).sqrt() * eps  # [B, C, h, w]
        target = eps if self.prediction_type == "epsilon" else ac.sqrt() * eps - (1 - ac).sqrt() * x0
        weight = torch.ones(b, device=latents.device)
        if self.snr_gamma is not None:
            snr = (ac / (1 - ac)).view(b)  # [B]
            weight = min_snr_weights(snr, self.snr_gamma, self.prediction_type)
        loss_c = None
        if self.loss.needs_threshold:
            a = self.alphas_cumprod[t]  # [B] on the CPU
            time = t.float() / self.num_timesteps  # [B] in [0, 1)
            loss_c = huber_thresholds(self.loss, time, ((1 - a) / a).sqrt()).to(latents.device)  # [B]
        return NoisedBatch(noisy.to(latents.dtype), t.to(latents.device), target, weight, loss_c)


class FlowObjective:
    """Rectified-flow objective: sigma sampling, the family's shift, velocity target."""

    def __init__(
        self,
        family: Family,
        cfg: TrainConfig,
        scheduler_config: Mapping[str, Any],
        loss: LossSettings | None = None,
    ):
        self.family = family
        self.cfg = cfg
        self.scheduler_config = dict(scheduler_config)
        self.loss = loss or LossSettings()

    def sigmas(self, n: int, latent_hw: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        """n training sigmas [n] float32: sampled, then shifted by the family hook."""
        cfg = self.cfg
        u = sample_flow_sigmas(n, cfg.timestep_sampling, cfg.logit_mean, cfg.logit_std, generator)
        shifted = self.family.shift_sigmas(u, latent_hw, cfg, self.scheduler_config)  # [n]
        return torch.as_tensor(shifted, dtype=torch.float32)

    def noise(self, latents: torch.Tensor, generator: torch.Generator) -> NoisedBatch:
        """latents [B,C,h,w] -> (1-s) x + s eps, target eps - x."""
        b, _, h, w = latents.shape
        s = self.sigmas(b, (h, w), generator)  # [B]
        eps = torch.randn(latents.shape, generator=generator).to(latents.device)  # [B, C, h, w]
        return self._mix(latents, s, eps)

    def at_levels(self, latents: torch.Tensor, levels: torch.Tensor, eps: torch.Tensor) -> NoisedBatch:
        """The batch at fixed noise levels (the validation loss: training/validate.py): levels [B]
        in (0, 1), shifted by the family hook like sampled sigmas; eps [B,C,h,w] fp32 the given
        noise. Draws nothing."""
        h, w = latents.shape[2:]
        shifted = self.family.shift_sigmas(levels.float(), (h, w), self.cfg, self.scheduler_config)
        return self._mix(latents, torch.as_tensor(shifted, dtype=torch.float32), eps.to(latents.device))

    def _mix(self, latents: torch.Tensor, s: torch.Tensor, eps: torch.Tensor) -> NoisedBatch:
        """(1-s) x + s eps and target eps - x of latents [B,C,h,w] at sigmas s [B], noise eps."""
        b = latents.shape[0]
        x0 = latents.float()
        sv = s.to(latents.device).view(b, 1, 1, 1)  # [B, 1, 1, 1]
        noisy = (1 - sv) * x0 + sv * eps  # [B, C, h, w]
        target = eps - x0  # [B, C, h, w]
        weight = torch.ones(b, device=latents.device)
        loss_c = None
        if self.loss.needs_threshold:  # time = sigma; noise-to-signal std ratio sigma / (1 - sigma)
            loss_c = huber_thresholds(self.loss, s, s / (1 - s)).to(latents.device)  # [B]
        return NoisedBatch(noisy.to(latents.dtype), s.to(latents.device), target, weight, loss_c)


def make_objective(
    family: Family, cfg: TrainConfig, scheduler_config: Mapping[str, Any]
) -> DdpmObjective | FlowObjective:
    """The objective of `family` (spec.objective), configured from cfg and the scheduler config
    (with the run's loss settings, which the Huber losses' thresholds need)."""
    loss = loss_settings(cfg)
    if family.spec.objective == "ddpm":
        return DdpmObjective(scheduler_config, cfg.snr_gamma, cfg.noise_offset, loss)
    return FlowObjective(family, cfg, scheduler_config, loss)
