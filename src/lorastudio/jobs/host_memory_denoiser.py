"""The denoiser's activations on CPU, a term of the host RAM forecast (jobs/host_memory.py, whose
module docstring has the formulas and their fits): a transformer's follow its image tokens, a
U-Net's its latent cells. Split out of host_memory.py; its names are re-exported there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio import json_read

if TYPE_CHECKING:
    from lorastudio.jobs.preflight import PlanValues

# A transformer denoiser's activations on CPU, bytes per image token per byte of the compute
# dtype: a fixed part and a part per unit of hidden x blocks (fitted: see jobs/host_memory.py's docstring).
CPU_ACT_PER_TOKEN = 850.0
CPU_ACT_PER_TOKEN_WIDTH = 38.0
# A U-Net denoiser's activations on CPU, bytes per latent cell of the micro-batch per channel of
# its first level per byte of the compute dtype (fitted: see jobs/host_memory.py's docstring).
CPU_UNET_ACT_PER_CELL_CHANNEL = 250.0


def cpu_activation_gb(tokens: int, width: int | None, act_bytes: int, plan: PlanValues) -> float | None:
    """GB of activations a transformer denoiser keeps for the backward on CPU: `tokens` (the
    micro-batch's image tokens) x `act_bytes` (the compute dtype's) x (CPU_ACT_PER_TOKEN +
    CPU_ACT_PER_TOKEN_WIDTH x `width`, its hidden x blocks), x ACTIVATION_FACTOR of the plan's
    checkpointing. None when the width is unknown (a U-Net): the caller asks
    cpu_unet_activation_gb."""
    from lorastudio.jobs.vram_estimate import ACTIVATION_FACTOR

    if width is None:
        return None
    per_token = act_bytes * (CPU_ACT_PER_TOKEN + CPU_ACT_PER_TOKEN_WIDTH * width)
    return tokens * per_token * ACTIVATION_FACTOR[plan.gradient_checkpointing] / 1e9


def cpu_unet_activation_gb(cells: int, c0: int | None, act_bytes: int, plan: PlanValues) -> float | None:
    """GB of activations a U-Net denoiser keeps for the backward on CPU: `cells` (the micro-batch's
    latent cells) x `c0` (its first level's channels, block_out_channels[0]) x `act_bytes` x
    CPU_UNET_ACT_PER_CELL_CHANNEL, x ACTIVATION_FACTOR of the plan's checkpointing. None when `c0`
    is unknown (not a U-Net): the caller keeps the accelerator formula."""
    from lorastudio.jobs.vram_estimate import ACTIVATION_FACTOR

    if c0 is None:
        return None
    per_cell = act_bytes * CPU_UNET_ACT_PER_CELL_CHANNEL * c0
    return cells * per_cell * ACTIVATION_FACTOR[plan.gradient_checkpointing] / 1e9


def _token_width(folder: Path) -> int | None:
    """hidden x blocks of the transformer denoiser whose config.json is in `folder`: the width
    num_attention_heads x attention_head_dim (else dim, hidden_size), the blocks num_layers +
    num_single_layers (else n_layers + n_refiner_layers). None when unreadable or a U-Net."""
    try:
        config = json_read.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    heads, head_dim = config.get("num_attention_heads"), config.get("attention_head_dim")
    if isinstance(heads, int) and isinstance(head_dim, int):
        hidden = heads * head_dim
    else:
        hidden = config.get("dim") or config.get("hidden_size")
    keys = ("num_layers", "num_single_layers", "n_layers", "n_refiner_layers")
    blocks = sum(v for k in keys if isinstance(v := config.get(k), int))
    if not isinstance(hidden, int) or hidden <= 0 or blocks <= 0:
        return None
    return hidden * blocks
