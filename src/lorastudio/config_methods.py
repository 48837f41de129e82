"""Combination rules of the training-method settings added by issue 28's second part (the loss;
more to come): settings that would be ignored, or cannot work together, refused with a
FieldProblem each (config_rules.combination_problems reports them with the rest), and how the
resolved config fills what was left unset. No torch here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

HUBER_LOSSES: tuple[str, ...] = ("huber", "smooth_l1")  # the losses that read huber_c / huber_schedule
HUBER_OPTIONS: tuple[str, ...] = ("huber_c", "huber_schedule")
HUBER_DEFAULTS: dict[str, Any] = {
    "huber_c": 0.1,
    "huber_schedule": "constant",
}  # sd-scripts / SimpleTuner's c


def loss_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """Huber options without a Huber loss (they would be ignored), and a scheduled threshold
    above 1 (the schedules move c from 1 on clean latents to huber_c at pure noise)."""
    if cfg.loss not in HUBER_LOSSES:
        return [
            FieldProblem(
                name, f"is an option of loss 'huber' / 'smooth_l1', not {cfg.loss!r} (it would be ignored)"
            )
            for name in HUBER_OPTIONS
            if getattr(cfg, name) is not None
        ]
    schedule = cfg.huber_schedule or HUBER_DEFAULTS["huber_schedule"]
    if schedule != "constant" and cfg.huber_c is not None and cfg.huber_c > 1:
        return [
            FieldProblem(
                "huber_c",
                f"the {schedule!r} schedule moves c from 1 (clean latents) down to huber_c (pure noise): "
                "use huber_c <= 1, or huber_schedule 'constant'",
            )
        ]
    return []


def resolve_loss(cfg: TrainConfig, values: dict[str, Any]) -> None:
    """Fill huber_c / huber_schedule in `values` (the resolved config's) with their defaults
    when the loss reads them and they were left unset."""
    if cfg.loss in HUBER_LOSSES:
        for name, default in HUBER_DEFAULTS.items():
            if values[name] is None:
                values[name] = default
