"""jobs/adapter_params.py: the trainable parameters the memory forecasts count for each adapter
kind equal peft's on the tiny FLUX.1 denoiser (LoRA, DoRA, LoHa, LoKr of several factors and
ranks, decompose_both, the full matrix of rank 1024), and the real-size FLUX.1 forecast of a
full-matrix LoKr (an imported LyCORIS `linear_dim` 10000: rank 1024) is a LoKr's, not a rank-1024
LoRA's (before: ~30 GB more, counted as LoRA)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from bench.header_pipelines import build_flux1

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.jobs.preflight import PlanValues
from lorastudio.jobs.vram_estimate import estimate_memory_gb, lora_param_count

GIB = 1024**3 / 1e9


@pytest.mark.parametrize(
    "options",
    [
        {"adapter": "lora", "lora_rank": 4},
        {"adapter": "dora", "lora_rank": 4},
        {"adapter": "loha", "lora_rank": 4},
        {"adapter": "lokr", "lora_rank": 4},
        {"adapter": "lokr", "lora_rank": 2, "lokr_factor": 4, "lokr_decompose_both": True},
        {"adapter": "lokr", "lora_rank": 1024, "lokr_factor": 16},
    ],
)
def test_the_count_is_peft_s(tiny_model, options):
    from lorastudio.training.adapters.lora import add_lora, lora_config_for

    family = families.get("flux")
    cfg = TrainConfig(
        family="flux", base_model=str(tiny_model("flux")), data_dir="d", lora_alpha=4.0, **options
    )
    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    params = add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets))
    peft = sum(p.numel() for p in params)
    counted = lora_param_count(
        Path(tiny_model("flux")) / "transformer",
        tuple(family.spec.lora_targets),
        cfg.lora_rank,
        cfg.adapter,
        cfg.lokr_factor,
        bool(cfg.lokr_decompose_both),
    )
    assert counted == peft


def test_a_full_matrix_lokr_is_forecast_as_one(tmp_path: Path) -> None:
    folder = build_flux1(tmp_path)

    def gib(**options: object) -> float:
        cfg = TrainConfig(family="flux", base_model=str(folder), data_dir="d", resolution=1024, **options)
        return estimate_memory_gb(cfg, folder, PlanValues("bf16", "off", 0, 1), 0)["estimated_gb"] / GIB

    lora16 = gib(lora_rank=16)
    lokr = gib(adapter="lokr", lora_rank=1024, lora_alpha=1024.0, lokr_factor=16)
    assert lokr <= lora16  # a few M parameters (w1 16 x 16, w2 192 x 192 a layer)
    assert gib(lora_rank=1024) > lora16 + 20  # a LoRA of that rank is what it was counted as


def test_convolution_targets_are_counted_as_peft_builds_them(tiny_model):
    """SDXL's resnet convolutions as lora_targets (peft adapts a Conv2d it is pointed at): the
    forecast counted only 2-D weights, so conv1 / conv2 targets were 0 parameters."""
    from lorastudio.training.adapters.lora import add_lora, lora_config_for

    family = families.get("sdxl")
    folder = Path(tiny_model("sdxl"))
    for options in (
        {"adapter": "dora", "lora_rank": 4},  # LoRA's count + a magnitude per row
        {"adapter": "loha", "lora_rank": 4},
        {"adapter": "lokr", "lora_rank": 4, "lokr_factor": 4, "lokr_decompose_both": True},
    ):
        cfg = TrainConfig(family="sdxl", base_model=str(folder), data_dir="d", lora_alpha=4.0,
                          lora_targets=["conv1", "conv_shortcut", "to_q"], **options)  # fmt: skip
        denoiser = family.load_denoiser(str(folder), None, torch.float32, torch.device("cpu"))
        peft = sum(p.numel() for p in add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets)))
        counted = lora_param_count(
            folder / family.spec.denoiser, tuple(cfg.lora_targets), cfg.lora_rank, cfg.adapter,
            cfg.lokr_factor, bool(cfg.lokr_decompose_both),
        )  # fmt: skip
        assert counted == peft, options
