"""Step arithmetic, optimizer and learning-rate schedule of a run.

With num_epochs > 0 an optimizer step consumes up to `grad_accum` micro-batches of one epoch
(steps never straddle epochs), so optimizer steps per epoch = ceil(batches per epoch /
grad_accum) and the run is num_epochs x that. Otherwise the run is cfg.steps optimizer steps of
exactly `grad_accum` micro-batches each, drawn from epoch after epoch as needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import BucketBatchSampler


def steps_per_epoch(batches_per_epoch: int, grad_accum: int) -> int:
    """Optimizer steps in one epoch of `batches_per_epoch` micro-batches."""
    return math.ceil(batches_per_epoch / grad_accum)


def total_steps(cfg: TrainConfig, batches_per_epoch: int) -> int:
    """Optimizer steps of the run: num_epochs x steps_per_epoch when num_epochs > 0, else cfg.steps."""
    if cfg.num_epochs > 0:
        return cfg.num_epochs * steps_per_epoch(batches_per_epoch, cfg.grad_accum)
    return cfg.steps


def group_micro_batches(batches: Sequence[list[int]], grad_accum: int) -> Iterator[list[list[int]]]:
    """Split one epoch's micro-batches into optimizer steps of up to `grad_accum` micro-batches
    (the last step of an epoch may have fewer)."""
    for start in range(0, len(batches), grad_accum):
        yield list(batches[start : start + grad_accum])


def iter_optimizer_steps(
    epoch_batches: Callable[[int], list[list[int]]], grad_accum: int, by_epoch: bool
) -> Iterator[tuple[int, list[list[int]]]]:
    """Endless (epoch, micro-batches of one optimizer step) pairs from `epoch_batches(epoch)`.
    by_epoch: steps end at each epoch's end (the last may be short); otherwise every step has
    exactly `grad_accum` micro-batches and may span two epochs (epoch = that of its last one)."""
    epoch = 0
    pending: list[list[int]] = []
    while True:
        batches = epoch_batches(epoch)
        if by_epoch:
            for group in group_micro_batches(batches, grad_accum):
                yield epoch, group
        else:
            for batch in batches:
                pending.append(batch)
                if len(pending) == grad_accum:
                    yield epoch, pending
                    pending = []
        epoch += 1


def iter_sampler_steps(
    sampler: BucketBatchSampler, grad_accum: int, by_epoch: bool
) -> Iterator[tuple[int, list[list[int]]]]:
    """The same (epoch, micro-batches) sequence as `iter_optimizer_steps(sampler.epoch_batches,
    ...)`, drawn through the sampler's own iteration so that, between two yielded steps,
    `sampler.state_dict()` is the position after the last step (restoring it with
    `load_state_dict` continues with the next step). Starts at the sampler's current position."""
    pending: list[list[int]] = []
    while True:
        epoch = sampler.epoch
        for batch in sampler:  # the rest of the current epoch; the next pass starts the next one
            epoch = sampler.epoch
            pending.append(batch)
            if len(pending) == grad_accum:
                yield epoch, pending
                pending = []
        if by_epoch and pending:  # epoch mode: the epoch's last step may be short
            yield epoch, pending
            pending = []


def make_optimizer(
    params: list[torch.nn.Parameter],
    cfg: TrainConfig,
    text_encoder_params: list[torch.nn.Parameter] | None = None,
    magnitudes: Collection[torch.nn.Parameter] = (),
) -> torch.optim.Optimizer:
    """The run's optimizer over the LoRA parameters: cfg.optimizer's builder (training/
    optimizers.py; default: fused AdamW with cfg.learning_rate and cfg.weight_decay). With
    `text_encoder_params` (SDXL's train_text_encoder) they are a second param group at
    cfg.text_encoder_lr (null: the learning rate). `magnitudes` (DoRA's magnitude vectors under
    weight-decay rule 2: `dora_magnitudes`) leave those groups for groups of their own with
    weight_decay 0, after them (the denoiser's, then the text encoders' at their LR), so that
    decay never pulls a magnitude (the base's row norms at the start) towards 0. The schedule
    scales every group alike. Without magnitudes (LoRA / LoHa / LoKr, DoRA under rule 1) the
    groups are those of before: one, or two with the text encoders."""
    from lorastudio.training.optimizers import build_optimizer

    own = {id(p) for p in magnitudes}
    te = text_encoder_params or []
    if not own and not te:
        return build_optimizer(params, cfg)
    te_lr = {} if cfg.text_encoder_lr is None else {"lr": cfg.text_encoder_lr}
    groups: list[dict] = [{"params": [p for p in params if id(p) not in own]}]
    if te:
        groups.append({"params": [p for p in te if id(p) not in own], **te_lr})
    if own:
        groups.append({"params": [p for p in params if id(p) in own], "weight_decay": 0.0})
        groups.append({"params": [p for p in te if id(p) in own], "weight_decay": 0.0, **te_lr})
    return build_optimizer([g for g in groups if g["params"]], cfg)  # type: ignore[arg-type]


def undecayed_magnitudes(identity: Mapping[str, Any], denoiser: Any) -> list[torch.nn.Parameter]:
    """The magnitudes `make_optimizer` keeps from weight decay in a run of `identity`: DoRA's
    magnitude vectors of the denoiser under weight-decay rule 2 (training/resume/identity_rules.py); []
    under rule 1 (a DoRA checkpoint of older code, resumed as it was written) and for every other
    adapter. (SDXL's text-encoder LoRA is plain LoRA whatever the adapter: no magnitudes.)"""
    from lorastudio.training.resume.identity_rules import DORA_DECAY_NOW, dora_decay_rule

    if dora_decay_rule(identity) != DORA_DECAY_NOW:
        return []
    return dora_magnitudes(denoiser)


def dora_magnitudes(*modules: Any) -> list[torch.nn.Parameter]:
    """The trainable DoRA magnitude vectors of `modules` (peft's `lora_magnitude_vector`
    parameters, one value per output row of an adapted layer); [] where none is DoRA."""
    return [
        p
        for module in modules
        if module is not None
        for name, p in module.named_parameters()
        if p.requires_grad and "lora_magnitude_vector" in name.split(".")
    ]


def make_lr_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, num_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """diffusers.optimization.get_scheduler(cfg.lr_scheduler) with cfg.lr_warmup_steps over
    `num_steps` optimizer steps, cosine_with_restarts' cfg.lr_cycles and polynomial's cfg.lr_power
    (null: 1.0) (Adafactor's relative step: optimizers.RelativeStepSchedule).
    `scheduler.get_last_lr()[0]` before a step is that step's LR."""
    from diffusers.optimization import get_scheduler

    from lorastudio.config_rules import relative_step
    from lorastudio.training.optimizers import RelativeStepSchedule

    if relative_step(cfg):  # Adafactor sizes its own steps; the schedule only reports them
        return RelativeStepSchedule(optimizer)
    return get_scheduler(
        cfg.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=cfg.lr_warmup_steps,
        num_training_steps=num_steps,
        num_cycles=cfg.lr_cycles or 1,  # read by cosine_with_restarts only (required there)
        power=1.0 if cfg.lr_power is None else cfg.lr_power,  # read by polynomial only
    )
