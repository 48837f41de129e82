"""The training loss between the denoiser's prediction and the objective's target
(TrainConfig.loss), for every objective (DDPM epsilon / v, rectified-flow velocity):

- mse (default): r**2, the loss of every run before this setting;
- l1: |r|;
- huber: 2c (sqrt(r**2 + c**2) - c), the pseudo-Huber loss of "Improved Techniques for Training
  Consistency Models" as kohya's sd-scripts, SimpleTuner and the diffusers scheduled-Huber
  example use it: r**2 (MSE) for |r| << c, 2c|r| (L1 scaled by 2c) for |r| >> c;
- smooth_l1: 2 (sqrt(r**2 + c**2) - c) = huber / c: r**2 / c for small residuals, 2|r| for large;

where r = prediction - target per element and c = TrainConfig.huber_c, optionally scheduled by
the sample's noise level (TrainConfig.huber_schedule), as those tools do for DDPM, extended here
to the flow families through the noise-to-signal ratio and the normalised time of each sample:

- constant: c;
- exponential: c ** tau, tau = normalised time in [0, 1] (DDPM t / T, flow sigma): 1 on clean
  latents (MSE-like) decaying to c at pure noise;
- snr: (1 - c) / (1 + k) ** 2 + c, k = the noise-to-signal ratio of the noisy input's standard
  deviations (DDPM sqrt((1 - alphabar) / alphabar), flow sigma / (1 - sigma)): 1 at k = 0, c as
  k grows.

The losses are written here (a line each) because torch's F.huber_loss / F.smooth_l1_loss are
the piecewise Huber with one float threshold, while the scheduled form needs a threshold per
sample and the peers' (smooth, pseudo-Huber) shape. Each sample's loss is the mean over its
elements; the per-sample loss weight (min-SNR for DDPM) multiplies it, so min-SNR composes with
every loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lorastudio.config_methods import HUBER_DEFAULTS, HUBER_LOSSES

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

HUBER_DEFAULT_C: float = HUBER_DEFAULTS["huber_c"]  # the peers' default (sd-scripts, SimpleTuner)
HUBER_DEFAULT_SCHEDULE: str = HUBER_DEFAULTS["huber_schedule"]


@dataclass(frozen=True)
class LossSettings:
    """The run's loss: `kind` (mse | l1 | huber | smooth_l1) and, for the Huber kinds, the
    threshold `c` and its `schedule` (constant | exponential | snr)."""

    kind: str = "mse"
    c: float = HUBER_DEFAULT_C
    schedule: str = HUBER_DEFAULT_SCHEDULE

    @property
    def needs_threshold(self) -> bool:
        """Whether the loss reads a per-sample threshold (huber / smooth_l1)."""
        return self.kind in HUBER_LOSSES


def loss_settings(cfg: TrainConfig) -> LossSettings:
    """The LossSettings of a config (huber_c / huber_schedule left unset: 0.1, constant)."""
    c = cfg.huber_c if cfg.huber_c is not None else HUBER_DEFAULT_C
    schedule = cfg.huber_schedule if cfg.huber_schedule is not None else HUBER_DEFAULT_SCHEDULE
    return LossSettings(cfg.loss, float(c), schedule)


def huber_thresholds(
    settings: LossSettings, time: torch.Tensor, noise_to_signal: torch.Tensor
) -> torch.Tensor:
    """The per-sample threshold c [B] fp32 of the Huber losses: `time` [B] the normalised time
    in [0, 1] (0 = clean), `noise_to_signal` [B] the ratio of the noisy input's noise and signal
    standard deviations (see the module docstring for each schedule)."""
    c = settings.c
    if settings.schedule == "constant":
        return torch.full_like(time, c, dtype=torch.float32)  # [B]
    if settings.schedule == "exponential":
        return torch.pow(torch.tensor(c, dtype=torch.float32), time.float())  # [B]
    if settings.schedule == "snr":
        return (1 - c) / (1 + noise_to_signal.float()) ** 2 + c  # [B]
    raise ValueError(f"unknown huber_schedule {settings.schedule!r}")


def elementwise_loss(kind: str, residual: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
    """The loss of each element of `residual` = prediction - target [B, ...] fp32; `c` [B] the
    per-sample threshold of huber / smooth_l1 (None for mse / l1). Same shape as `residual`."""
    if kind == "mse":
        return residual**2
    if kind == "l1":
        return residual.abs()
    if kind not in HUBER_LOSSES:
        raise ValueError(f"unknown loss {kind!r}")
    if c is None:
        raise ValueError(f"the {kind} loss needs a threshold per sample")
    cb = c.view(-1, *([1] * (residual.dim() - 1)))  # [B, 1, ...]
    squared = residual**2  # [B, ...]
    soft = squared / (torch.sqrt(squared + cb**2) + cb)  # = sqrt(r^2 + c^2) - c, without fp32 cancellation
    return 2 * cb * soft if kind == "huber" else 2 * soft


def per_sample_loss(
    kind: str, pred: torch.Tensor, target: torch.Tensor, c: torch.Tensor | None = None
) -> torch.Tensor:
    """Each sample's mean elementwise loss: pred [B, ...] (any float dtype), target [B, ...] fp32,
    c [B] or None -> [B] fp32."""
    residual = pred.float() - target  # [B, ...]
    return elementwise_loss(kind, residual, c).flatten(1).mean(dim=1)  # [B]
