"""Shared cases of the memory tests (test_memory.py: checkpointing; test_block_swap.py): the
tiny pipeline of each family with LoRA, a fixed batch and an SGD step."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.tiny.models import build
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.noise import make_objective
from lorastudio.training.step import forward_backward

CPU = torch.device("cpu")
FAMILIES = ["sdxl", "flux", "qwen-image", "z-image", "flux2", "flux2-klein"]
RES = 32
_PIPES: dict[str, tuple[Any, TrainConfig, dict[str, Any]]] = {}


def tiny_pipe(key: str) -> tuple[Any, TrainConfig, dict[str, Any]]:
    """The tiny pipeline of `key` (built once), its config and the collated conditioning."""
    if key not in _PIPES:
        fam = families.get(key)
        pipe = build(key, 0)
        extra = {"max_sequence_length": 16} if "max_sequence_length" in fam.spec.supports else {}
        cfg = TrainConfig(
            family=key,
            base_model="tiny",
            data_dir="tiny",
            lora_rank=4,
            lora_alpha=4.0,
            resolution=RES,
            **extra,
        )
        cond = fam.collate_conditioning(fam.encode_prompts(pipe, ["a red circle", "a blue square"], cfg))
        _PIPES[key] = (pipe, cfg, cond)
    return _PIPES[key]


class Case:
    """A fresh copy of a family's tiny denoiser with LoRA (non-zero B), a fixed batch and an SGD
    step: `step()` = forward + backward (+ update) -> (loss, gradients)."""

    def __init__(self, key: str) -> None:
        pipe, self.cfg, self.cond = tiny_pipe(key)
        self.family = families.get(key)
        self.objective = make_objective(self.family, self.cfg, dict(pipe.scheduler.config))
        self.denoiser = copy.deepcopy(pipe.unet if key == "sdxl" else pipe.transformer).train()
        torch.manual_seed(0)
        self.params = add_lora(self.denoiser, lora_config_for(self.cfg, self.family.spec.lora_targets))
        with torch.no_grad():
            for p in self.params:
                p.normal_(std=0.05)
        h = RES // self.family.spec.vae_scale_factor
        g = torch.Generator().manual_seed(1)
        self.latents = torch.randn(2, self.family.spec.latent_channels, h, h, generator=g)  # [B, C, h, w]
        self.info = {
            "original_size": [(RES, RES)] * 2,
            "crop_top_left": [(0, 0)] * 2,
            "target_size": (RES, RES),
        }
        self.optimizer = torch.optim.SGD(self.params, lr=0.1)

    def step(self, update: bool = False) -> tuple[float, list[torch.Tensor]]:
        self.optimizer.zero_grad(set_to_none=True)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        share = forward_backward(
            self.family, self.denoiser, self.objective, self.latents, self.cond, self.info, self.cfg,
            torch.Generator().manual_seed(5), 2, scaler,
        )  # fmt: skip
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in self.params]
        if update:
            self.optimizer.step()
        return float(share), grads


def assert_same(
    a: tuple[float, list[torch.Tensor]], b: tuple[float, list[torch.Tensor]], exact: bool
) -> None:
    if exact:
        assert a[0] == b[0]
        assert all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))
    else:
        assert a[0] == pytest.approx(b[0], rel=1e-6)
        for x, y in zip(a[1], b[1], strict=True):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)


class CountingBackend:
    """A torch.compile backend that runs the captured graph eagerly and counts graphs and runs."""

    def __init__(self) -> None:
        self.graphs = 0
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1

        def run(*args: Any) -> Any:
            self.runs += 1
            return gm.forward(*args)

        return run
