"""Noise-level shifts of the flow families: the static (SD3) shift and FlowMatchEulerDiscreteScheduler's
dynamic, image-size dependent one (Family.shift_sigmas)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def static_shift(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """SD3-style static shift: s*x / (1 + (s - 1)*x); shift 1 is the identity."""
    return shift * sigmas / (1 + (shift - 1) * sigmas)


def dynamic_shift_mu(image_seq_len: int, scheduler_config: Mapping[str, Any]) -> float:
    """mu for dynamic shifting, linear in the image sequence length (diffusers calculate_shift)."""
    base_len = scheduler_config.get("base_image_seq_len", 256)
    max_len = scheduler_config.get("max_image_seq_len", 4096)
    base_shift = scheduler_config.get("base_shift", 0.5)
    max_shift = scheduler_config.get("max_shift", 1.15)
    m = (max_shift - base_shift) / (max_len - base_len)
    return image_seq_len * m + (base_shift - m * base_len)


def time_shift(sigmas: torch.Tensor, mu: float, kind: str = "exponential") -> torch.Tensor:
    """FlowMatchEulerDiscreteScheduler's time shift of sigmas [B] by mu (sigma exponent 1)."""
    if kind == "exponential":
        return math.exp(mu) / (math.exp(mu) + (1 / sigmas - 1))
    return mu / (mu + (1 / sigmas - 1))
