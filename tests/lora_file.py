"""A small FLUX.1 LoRA file for the CLI's `lora` command tests: one single-block q projection
in peft's names, rank 2, seeded (the same bytes every time)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from lorastudio.lora.metadata import PREFIX

KEY = "transformer.single_transformer_blocks.0.attn.to_q"


def write_flux_lora(path: Path) -> Path:
    """Write the LoRA to `path` (family "flux" in its metadata); returns `path`."""
    g = torch.Generator().manual_seed(0)
    tensors = {
        f"{KEY}.lora_A.weight": torch.randn(2, 32, generator=g),  # [r, in]
        f"{KEY}.lora_B.weight": torch.randn(32, 2, generator=g),  # [out, r]
    }
    save_file(tensors, str(path), metadata={PREFIX + "family": "flux"})
    return path
