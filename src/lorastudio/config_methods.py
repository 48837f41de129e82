"""Combination rules of the training-method settings added by issue 28's second part (the loss,
SDXL's text-encoder LoRA): settings that would be ignored, or cannot work together, refused with a
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


# why a family other than SDXL refuses the text-encoder settings (config_resolve._unsupported)
FAMILY_FIELD_REASONS: dict[str, str] = {
    name: " (text-encoder LoRA is trained for SDXL's two CLIP encoders only: the other families' "
    "text encoders are billion-parameter T5 / Qwen / Mistral models that peers keep frozen)"
    for name in ("train_text_encoder", "text_encoder_lr")
}


def text_encoder_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """text_encoder_lr without train_text_encoder, and what a run with text-encoder LoRA cannot
    do: another adapter than LoRA, a measured memory plan, several GPUs, a learning rate beside
    Adafactor's own step size, a text_encoder_lr other than learning_rate with Prodigy."""
    if not cfg.train_text_encoder:
        if cfg.text_encoder_lr is not None:
            return [
                FieldProblem("text_encoder_lr", "needs train_text_encoder (there is no text-encoder LoRA)")
            ]
        return []
    problems = []
    if cfg.adapter != "lora":
        problems.append(
            FieldProblem(
                "train_text_encoder",
                f"the text encoders are trained as plain LoRA (the files' lora_te1_ / text_encoder. layout); "
                f"adapter {cfg.adapter!r} applies to the U-Net only: use adapter 'lora'",
            )
        )
    if cfg.memory_budget_gb is not None:
        problems.append(
            FieldProblem(
                "memory_budget_gb",
                "the plan chooser measures U-Net-only steps; with train_text_encoder set the plan settings instead",
            )
        )
    if cfg.micro_batch_size is not None and cfg.micro_batch_size < cfg.batch_size:
        problems.append(
            FieldProblem(
                "micro_batch_size",
                "with train_text_encoder a batch's captions are encoded once for its one backward pass: "
                "leave micro_batch_size unset (or equal to batch_size)",
            )
        )
    if cfg.num_gpus > 1:
        problems.append(
            FieldProblem(
                "num_gpus",
                "data-parallel runs average the U-Net's LoRA gradients only; train_text_encoder runs on one GPU",
            )
        )
    if cfg.validation_split is not None:
        problems.append(
            FieldProblem(
                "validation_split",
                "the validation loss encodes its captions once, before training; with train_text_encoder "
                "they would need the encoders' current LoRA every round (not supported yet)",
            )
        )
    if cfg.text_encoder_lr is not None and cfg.optimizer == "adafactor" and cfg.adafactor_relative_step:
        problems.append(
            FieldProblem("text_encoder_lr", "adafactor_relative_step computes its own step size: remove it")
        )
    if cfg.text_encoder_lr is not None and cfg.optimizer == "prodigy":
        problems += _prodigy_text_encoder_lr_problems(cfg, cfg.text_encoder_lr)
    return problems


def _prodigy_text_encoder_lr_problems(cfg: TrainConfig, text_encoder_lr: float) -> list[FieldProblem]:
    """Prodigy learns one step size d for every parameter group from the largest group lr, and
    prodigyopt refuses groups whose lr differ (a RuntimeError at the first step): a text_encoder_lr
    other than the run's learning_rate (Prodigy's default 1.0 when unset) cannot be honoured."""
    from lorastudio.config_rules import PRODIGY_DEFAULT_LR

    learning_rate = cfg.learning_rate if "learning_rate" in cfg.model_fields_set else PRODIGY_DEFAULT_LR
    if text_encoder_lr == learning_rate:
        return []
    return [
        FieldProblem(
            "text_encoder_lr",
            f"{text_encoder_lr:g} differs from learning_rate "
            f"({'the family default' if learning_rate is None else f'{learning_rate:g}'}): prodigy learns one "
            "step size for the U-Net and the text encoders from the largest group lr (prodigyopt refuses "
            "different lrs per group); remove text_encoder_lr, or use another optimizer",
        )
    ]
