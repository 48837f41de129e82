"""One optimizer step whose loss and gradient norm may not be on the host yet (training/optimize.py's
pipelined loop: the update queued on the device, the values read behind an event)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lorastudio.training.ema import AdapterEma


def fused_adam(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer` is a fused Adam(W): the one kind that skips a step on the device."""
    fused_adam = isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW)
    return fused_adam and bool(optimizer.defaults.get("fused"))


@dataclass
class StepInFlight:
    """One optimizer step whose loss and gradient norm (`values`, [2] float64 on the device) may
    not be on the host yet.

    Sync mode (fp16 loss scaling, data-parallel runs): the optimizer update waits for the host
    read (`_record` applies it when the divergence guard lets it). Pipelined mode
    (`apply_on_device`): the update is queued at once and skipped BY THE DEVICE when the loss or
    norm is not finite (fused AdamW's found_inf: the same rule as the guard's), and the values
    travel to pinned memory behind an event: the loop reads them after queueing the next step,
    so the GPU never drains between steps. Same maths either way."""

    step: int
    epoch: int
    lr: float
    samples: int
    values: torch.Tensor
    applied: bool = False  # the update (or its device-side skip) is queued
    host: torch.Tensor | None = None  # [2] float64, pinned when the values are on a GPU
    ready: Any = None  # torch.cuda.Event recorded after the copy

    def apply_on_device(
        self, optimizer: torch.optim.Optimizer, scheduler: Any, ema: AdapterEma | None = None
    ) -> None:
        """Queue the update (fused AdamW; skipped by the device when a value is not finite),
        fold it into the `ema`, zero the gradients, step the LR `scheduler` and start the
        values' copy to the host."""
        optimizer.found_inf = (~torch.isfinite(self.values).all()).float()  # type: ignore[attr-defined]  # []
        optimizer.step()  # a no-op update (state included) when found_inf is 1
        optimizer.found_inf = None  # type: ignore[attr-defined]
        if ema is not None:
            ema.update(self.step)
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        self.applied = True
        if self.values.is_cuda:
            self.host = torch.empty(2, dtype=torch.float64, pin_memory=True)
            self.host.copy_(self.values, non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record()
        else:
            self.host = self.values

    def read(self) -> tuple[float, float]:
        """(loss, grad norm) on the host; waits only for this step's copy."""
        if self.ready is not None:
            self.ready.synchronize()
        loss, grad_norm = (self.host if self.host is not None else self.values).tolist()
        return loss, grad_norm
