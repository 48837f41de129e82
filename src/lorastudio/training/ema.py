"""An exponential moving average of the adapter's weights (TrainConfig.ema_decay): after every
`ema_update_every`-th optimizer step, shadow = decay x shadow + (1 - decay) x weight, per
trainable parameter, in fp32, starting from the weights before the first step. The run's LoRA
file is the EMA one; the raw weights are saved beside it (training/loop.py `_export`), and
sample previews render either (`sample_with_ema`).

Hand-written (a few lines) rather than diffusers.training_utils.EMAModel because that one (1)
mixes shadow and weight in one expression, so its shadow must sit on the weights' device (we
offer `ema_on_cpu` to keep the GPU free of it), and (2) always applies its own decay warmup
min(decay, (1 + t) / (10 + t)), where users ask for the plain, documented EMA of their decay.

A skipped (non-finite) step still counts: the shadow moves towards the unchanged weights, the
same rule in the pipelined and the synchronous loop. The state (`state_dict`: the shadow
tensors and the update count) goes into checkpoints, so a resumed run's EMA is bitwise that of
the uninterrupted one (CPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class AdapterEma:
    """The EMA of the trainable adapter parameters `named` ({name: parameter}; the names are
    the denoiser's parameter names, e.g. "...to_q.lora_A.default.weight").

    Args:
        named: the parameters to average (fp32 LoRA parameters), by name.
        decay: the EMA decay in (0, 1).
        every: update after every `every`-th optimizer step (the step number counts from the
            run's first step, also across a resume).
        on_cpu: keep the shadow in CPU memory (each update copies the weights to the host).
    """

    def __init__(
        self, named: dict[str, torch.nn.Parameter], decay: float, every: int = 1, on_cpu: bool = False
    ):
        self.params = dict(named)
        self.decay = float(decay)
        self.every = int(every)
        device = torch.device("cpu") if on_cpu else None
        self.shadow = {
            n: p.detach().to(device=device, dtype=torch.float32, copy=True) for n, p in self.params.items()
        }
        self.updates = 0

    def update(self, step: int) -> None:
        """Fold the current weights into the shadow when optimizer step `step` (1-based) is due."""
        if step % self.every:
            return
        with torch.no_grad():
            for name, param in self.params.items():
                shadow = self.shadow[name]
                weight = param.detach().to(device=shadow.device, dtype=torch.float32)
                shadow.mul_(self.decay).add_(weight, alpha=1.0 - self.decay)  # same shape as param
        self.updates += 1

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """Within the block the parameters hold the EMA weights (in their own dtype and device);
        the raw weights are put back afterwards, bitwise, also when the block raises."""
        with torch.no_grad():
            raw = {n: p.detach().clone() for n, p in self.params.items()}
            for name, param in self.params.items():
                param.copy_(self.shadow[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, param in self.params.items():
                    param.copy_(raw[name])

    def state_dict(self) -> dict[str, Any]:
        """{"shadow": {name: tensor on the CPU}, "updates": count} (what a checkpoint stores)."""
        return {
            "shadow": {n: s.detach().cpu().clone() for n, s in self.shadow.items()},
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` into this EMA. Raises ValueError when the saved shadow does not
        fit the parameters (other names or shapes)."""
        shadow = state["shadow"]
        if set(shadow) != set(self.shadow) or any(shadow[n].shape != s.shape for n, s in self.shadow.items()):
            raise ValueError("the EMA state does not fit this run's adapter parameters")
        with torch.no_grad():
            for name, mine in self.shadow.items():
                mine.copy_(shadow[name])
        self.updates = int(state["updates"])


def make_ema(
    denoiser: torch.nn.Module,
    params: list[torch.nn.Parameter],
    cfg: Any,
    extra: dict[str, torch.nn.Parameter] | None = None,
) -> AdapterEma | None:
    """The run's AdapterEma of `params` (named as in `denoiser`, or by `extra`: {name: parameter},
    the text encoders' LoRA of an SDXL train_text_encoder run) from cfg.ema_decay /
    ema_update_every / ema_on_cpu; None without ema_decay."""
    if cfg.ema_decay is None:
        return None
    names = {id(p): n for n, p in denoiser.named_parameters()}
    names.update({id(p): n for n, p in (extra or {}).items()})
    named = {names.get(id(p), f"param{i}"): p for i, p in enumerate(params)}
    return AdapterEma(named, cfg.ema_decay, cfg.ema_update_every, cfg.ema_on_cpu)
