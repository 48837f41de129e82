"""The optimizers a run can use (TrainConfig.optimizer): a registry of small builders, name ->
`build(params, cfg) -> torch.optim.Optimizer`, each over the library that implements it (torch's
fused AdamW, bitsandbytes' 8-bit AdamW / Lion, prodigyopt's Prodigy, transformers' Adafactor).
Nothing is hand-written here but the wiring.

Every builder reads only its optimizer's options (config_rules.OPTIMIZER_OPTIONS; the others are
refused by validation), fills an option left at null with the library's own default, and returns
an optimizer whose `state_dict()` holds its complete state (checkpoints save it: training/
snapshot.py). Where an optimizer cannot run on a host (8-bit without CUDA or without bitsandbytes)
preflight refuses the run first (config_host.optimizer_host_problems).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.config_rules import relative_step

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

Builder = Callable[[list[torch.nn.Parameter], "TrainConfig"], torch.optim.Optimizer]


def _adam_options(cfg: TrainConfig) -> dict[str, Any]:
    """betas / eps when the user set them (else the library's defaults apply)."""
    options: dict[str, Any] = {}
    if cfg.optimizer_betas is not None:
        options["betas"] = tuple(cfg.optimizer_betas)
    if cfg.optimizer_eps is not None:
        options["eps"] = cfg.optimizer_eps
    return options


def build_adamw(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """torch AdamW; the fused kernel when every parameter is a float tensor on a device that has
    it (CPU or CUDA). With betas / eps unset, exactly the engine's AdamW before optimizers were
    selectable."""
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]  # param groups too
    fused = all(p.is_floating_point() and p.device.type in ("cuda", "cpu") for p in tensors)
    return torch.optim.AdamW(
        params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, fused=fused, **_adam_options(cfg)
    )


def build_adamw8bit(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """bitsandbytes AdamW8bit: block-wise 8-bit moments (about a quarter of AdamW's state)."""
    import bitsandbytes as bnb

    return bnb.optim.AdamW8bit(
        params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, **_adam_options(cfg)
    )


def build_lion8bit(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """bitsandbytes Lion8bit: sign updates with one 8-bit moment (Lion wants a ~3-10x smaller LR)."""
    import bitsandbytes as bnb

    options = {"betas": tuple(cfg.optimizer_betas)} if cfg.optimizer_betas is not None else {}
    return bnb.optim.Lion8bit(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, **options)


def build_prodigy(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """prodigyopt Prodigy: Adam whose step size d is estimated on the fly; learning_rate (default
    1.0) multiplies it. d and its accumulators live in the param groups (saved with the state)."""
    from prodigyopt import Prodigy

    options = _adam_options(cfg)
    for name in ("d_coef", "safeguard_warmup", "use_bias_correction"):
        value = getattr(cfg, f"prodigy_{name}")
        if value is not None:
            options[name] = value
    return Prodigy(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, **options)


def build_adafactor(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """transformers Adafactor: factored second moments, no first moment. With relative_step its
    own 1/sqrt(step) size replaces learning_rate (the schedule then only reports it:
    RelativeStepSchedule); scale_parameter / warmup_init as transformers defines them."""
    from transformers.optimization import Adafactor

    relative = relative_step(cfg)
    return Adafactor(
        params,
        lr=None if relative else cfg.learning_rate,
        relative_step=relative,
        scale_parameter=bool(cfg.adafactor_scale_parameter),
        warmup_init=bool(cfg.adafactor_warmup_init),
        weight_decay=cfg.weight_decay,
    )


OPTIMIZERS: dict[str, Builder] = {
    "adamw": build_adamw,
    "adamw8bit": build_adamw8bit,
    "lion8bit": build_lion8bit,
    "prodigy": build_prodigy,
    "adafactor": build_adafactor,
}


def build_optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer cfg.optimizer names, over `params` (the trainable adapter parameters, or
    torch param-group dicts: a group's own "lr" overrides cfg.learning_rate)."""
    return OPTIMIZERS[cfg.optimizer](params, cfg)


def step_size(optimizer: torch.optim.Optimizer, scheduled: float) -> float:
    """The learning rate the optimizer's next step applies, as a run logs it (Progress.lr, the
    trackers' train/lr, the run record's charts): `scheduled` (the LR schedule's value) for most;
    Prodigy's d * lr (x Adam's bias correction when on), prodigyopt's own `dlr`: one for every
    group, from the largest group LR and the step size d it has learned so far (its
    `learning_rate` is only a multiplier of d, so the schedule's value says nothing of the step)."""
    group = optimizer.param_groups[0]
    if "d" not in group or "d_coef" not in group:  # not Prodigy
        return scheduled
    lr = max(g["lr"] for g in optimizer.param_groups)
    correction = 1.0
    if group.get("use_bias_correction"):
        beta1, beta2 = group["betas"]
        k = group["k"]
        correction = ((1 - beta2 ** (k + 1)) ** 0.5) / (1 - beta1 ** (k + 1))
    return float(group["d"] * lr * correction)


class RelativeStepSchedule(torch.optim.lr_scheduler.LRScheduler):
    """The LR "schedule" of Adafactor with relative_step: it changes nothing (Adafactor ignores
    the group's lr then) and reports the relative step size the next update will use,
    transformers' own `Adafactor._get_lr` (before the per-parameter RMS scale)."""

    def get_lr(self) -> list[float]:  # type: ignore[override]
        opt: Any = self.optimizer
        lrs = []
        for group in opt.param_groups:
            step = opt.state.get(group["params"][0], {}).get("step", 0) + 1
            lrs.append(float(opt._get_lr({**group, "scale_parameter": False}, {"step": step})))
        return lrs
