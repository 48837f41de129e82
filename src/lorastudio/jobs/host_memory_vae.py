"""The VAE's term of the host RAM forecast (jobs/host_memory.py, whose module docstring has the
formula and its fit): its working memory for one encode or decode call, from vae/config.json
(its class and its channels at full resolution), without loading it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorastudio import json_read

# Bytes of VAE working memory per full-resolution pixel, per channel of the first level, per
# byte of the dtype: the residual blocks keep input, normalised and convolved copies at once
# (fitted: see the module docstring).
VAE_ACT_PER_CHANNEL_PIXEL = 4.7
# Per VAE class (vae/config.json _class_name): (fixed GB, bytes per full-resolution pixel per
# dtype byte, bytes per pixel per channel of the first level per dtype byte). Other classes:
# (0, 0, VAE_ACT_PER_CHANNEL_PIXEL), the 2D AutoencoderKL's (SD, SDXL, FLUX.1, FLUX.2's VAE).
VAE_ACT_BY_CLASS: dict[str, tuple[float, float, float]] = {
    "AutoencoderKLQwenImage": (0.12, 84.0, 6.5),
}
# The fixed part is not held whatever the call's size: it builds up with the pixels, at most
# VAE_FIXED_RAMP bytes per pixel per channel of the first level per dtype byte, until it reaches
# the fixed GB (the tiny Qwen-Image VAE, c0 16, fp32, one image alone: 0.012 / 0.043 / 0.087 /
# 0.172 GB of working memory at 64 / 128 / 192 / 256 px, ~2,600 B per pixel, against the row's
# 0.12 GB + 752 B per pixel above 256 px; RESULTS note 41). 29 B reaches 0.12 GB at 256 px for c0 16.
VAE_FIXED_RAMP = 29.0


def vae_act_gb(folder: Path, pixels: int, act_bytes: int) -> float:
    """GB of working memory the VAE in `folder` holds for one call over `pixels` full-resolution
    pixels (images x W x H) in a dtype of `act_bytes`: its class's fixed part, built up with the
    pixels (at most VAE_FIXED_RAMP x c0 x pixels x act_bytes), + (per pixel + per channel x c0) x
    pixels x act_bytes (VAE_ACT_BY_CLASS; module docstring)."""
    default = (0.0, 0.0, VAE_ACT_PER_CHANNEL_PIXEL)
    fixed, per_pixel, per_channel = VAE_ACT_BY_CLASS.get(_vae_class(folder), default)
    c0 = _vae_first_channels(folder)
    fixed = min(fixed, VAE_FIXED_RAMP * c0 * pixels * act_bytes / 1e9)
    return fixed + (per_pixel + per_channel * c0) * pixels * act_bytes / 1e9


def _vae_config(folder: Path) -> dict[str, Any]:
    """The config.json of the component in `folder` (the VAE's, the denoiser's; {} when unreadable)."""
    try:
        config = json_read.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _vae_class(folder: Path) -> str:
    """_class_name of the VAE's config.json ("" when unreadable)."""
    name = _vae_config(folder).get("_class_name")
    return name if isinstance(name, str) else ""


def _vae_first_channels(folder: Path) -> int:
    """The VAE's channels at full resolution: block_out_channels[0] of its config.json (the 2D
    AutoencoderKL's), else base_dim x dim_mult[0] (the Qwen-Image / Wan VAE's); 128, the SD/FLUX.1
    VAE's, when neither is readable."""
    config = _vae_config(folder)
    try:
        channels = config.get("block_out_channels")
        if channels:
            return int(channels[0])
        base, mult = config.get("base_dim"), config.get("dim_mult") or [1]
        return int(base) * int(mult[0]) if base else 128
    except (ValueError, TypeError, IndexError):
        return 128
