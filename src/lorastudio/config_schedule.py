"""The periodic settings (`..._every`) against the run's length, and the keep options that
depend on them (no torch).

A periodic setting falls on every N-th optimizer step of the run; one larger than the run's
optimizer steps falls on none, so it cannot be honoured and is refused (naming it and the run's
length), never silently ignored. One equal to the run's length falls on the last step, where each
does what its description says (samples / validation: the final round; EMA: one update;
checkpoints / LoRA snapshots: none, the run's final LoRA is that step's), so it is accepted.

`keep_loras` keeps the newest intermediate LoRA snapshots; the writers of those (SNAPSHOT_WRITERS)
write only before the last step (lora/snapshots.py, training/resume/checkpoint.py, training/validate.py),
so it is refused unless one of them falls on a step before the last.

The learning-rate schedule's own settings: `lr_warmup_steps` must end before the run does (a
warmup as long as the run never reaches learning_rate, and the schedule after it never starts),
`lr_cycles` is cosine_with_restarts' (required there: with one cycle it is the cosine schedule, so
the choice would change nothing) and `lr_power` polynomial's; either given to another schedule
would be ignored, so it is refused.

The run's length is `steps`, or with `num_epochs` > 0 num_epochs x the optimizer steps of one
epoch, known only once the dataset is scanned: config_rules checks what the config alone says
(`schedule_problems(cfg, None)` for an epoch run), jobs/validation checks the rest after the scan
with the real length.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

# The settings that write LoRA snapshots while a run trains (every save_lora_every steps, every
# checkpoint, every validation round before the last step); keep_loras means nothing without one.
SNAPSHOT_WRITERS: tuple[str, ...] = ("save_lora_every", "save_every", "validate_every")

# Each periodic setting and the setting it needs to mean anything (refused elsewhere without it,
# so it is checked against the run's length only when that one is set).
EVERY_SETTINGS: dict[str, str | None] = {
    "save_every": None,
    "save_lora_every": None,
    "sample_every": "sample_prompts",
    "validate_every": "validation_split",
    "ema_update_every": "ema_decay",
}


# Each scheduler option and the lr_scheduler that reads it (diffusers' get_scheduler argument).
SCHEDULER_OPTIONS: dict[str, str] = {"lr_cycles": "cosine_with_restarts", "lr_power": "polynomial"}
# diffusers' polynomial schedule decays to this LR (its lr_end) and raises below it
POLYNOMIAL_LR_END = 1e-7


def lr_schedule_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """The schedule's settings that the chosen lr_scheduler would ignore (a warmup on the
    constant schedule, another scheduler's option), needs (cosine_with_restarts' lr_cycles) or
    cannot start from (polynomial: a learning_rate not above the LR it decays to)."""
    problems: list[FieldProblem] = []
    if cfg.lr_warmup_steps > 0 and cfg.lr_scheduler == "constant":
        problems.append(
            FieldProblem("lr_warmup_steps", "the constant schedule has no warmup; use constant_with_warmup")
        )
    problems += [
        FieldProblem(
            name,
            f"is an option of lr_scheduler {owner!r}, not {cfg.lr_scheduler!r} (it would be ignored)",
        )
        for name, owner in SCHEDULER_OPTIONS.items()
        if getattr(cfg, name) is not None and cfg.lr_scheduler != owner
    ]
    if cfg.lr_scheduler == "cosine_with_restarts" and cfg.lr_cycles is None:
        problems.append(
            FieldProblem(
                "lr_cycles",
                "cosine_with_restarts needs the number of cosine cycles (2 or more: each restarts at "
                "learning_rate); with one it is the cosine schedule: set lr_cycles, or use 'cosine'",
            )
        )
    if (
        cfg.lr_scheduler == "polynomial"
        and cfg.learning_rate is not None
        and cfg.learning_rate <= POLYNOMIAL_LR_END
    ):
        problems.append(
            FieldProblem(
                "learning_rate",
                f"{cfg.learning_rate:g} is not above {POLYNOMIAL_LR_END:g}, the LR the polynomial schedule decays "
                "to (diffusers' lr_end): raise it, or use 'linear'",
            )
        )
    return problems


def _length(cfg: TrainConfig, total: int) -> str:
    """How the run's length is named in a problem."""
    if cfg.num_epochs > 0:
        return f"the run's {total} optimizer steps (num_epochs={cfg.num_epochs})"
    return f"the run's {total} optimizer steps (steps={total})"


def schedule_problems(cfg: TrainConfig, total: int | None) -> list[FieldProblem]:
    """Periodic settings that fall on no step of a run of `total` optimizer steps, a warmup that
    does not end before it, and keep_loras when no snapshot writer falls on a step before the last. `total` None (an epoch run before its
    dataset is scanned): only keep_loras without any snapshot writer set."""
    problems: list[FieldProblem] = []
    if total is not None:
        for name, needs in EVERY_SETTINGS.items():
            every = getattr(cfg, name)
            if every is None or every <= total or (needs is not None and not getattr(cfg, needs)):
                continue
            problems.append(
                FieldProblem(
                    name,
                    f"{every} exceeds {_length(cfg, total)}: it would fall on no step, so it cannot be "
                    f"honoured; use at most {total}, or leave it unset",
                )
            )
        if cfg.lr_warmup_steps >= total and cfg.lr_scheduler != "constant":
            problems.append(
                FieldProblem(
                    "lr_warmup_steps",
                    f"{cfg.lr_warmup_steps} does not end before {_length(cfg, total)}: the LR would never "
                    f"reach learning_rate and the {cfg.lr_scheduler} schedule would never start; use at "
                    f"most {total - 1}",
                )
            )
    if cfg.keep_loras is None:
        return problems
    writers = {name: getattr(cfg, name) for name in SNAPSHOT_WRITERS if getattr(cfg, name)}
    if not writers:
        problems.append(
            FieldProblem(
                "keep_loras",
                "needs save_lora_every, save_every or validate_every: without one the run writes no LoRA "
                "snapshot while it trains (only a stop-and-save writes one), so there is nothing to keep "
                "or remove; set one of them, or leave keep_loras unset",
            )
        )
    elif total is not None and all(every >= total for every in writers.values()):
        named = ", ".join(f"{name}={every}" for name, every in writers.items())
        problems.append(
            FieldProblem(
                "keep_loras",
                f"no LoRA snapshot would be written to keep: {named} falls on no step before the last of "
                f"{_length(cfg, total)} (snapshots are written before the last step only; the final "
                f"LoRA is the last step's); lower {' or '.join(writers)} below {total}, or leave "
                "keep_loras unset",
            )
        )
    return problems


# An EMA (ema_decay) whose saved weights keep more than this share of the adapter's starting
# weights is named by the run's warnings (ema_horizon_warning).
EMA_START_SHARE_WARNED = 0.05


def ema_horizon_warning(cfg: TrainConfig, total: int) -> str | None:
    """The warning for an EMA too slow for a run of `total` optimizer steps, else None.

    The EMA (training/ema.py) is the plain one of its decay d, without a warmup, started from the
    adapter's starting weights: after U updates (one every ema_update_every steps) those keep a
    share d**U of the saved LoRA. A fresh adapter starts as no change (peft's lora_B = 0), so with
    d**U above EMA_START_SHARE_WARNED the saved LoRA is that much weaker than the trained one: e.g.
    0.9999, which the setting's description calls typical, over the default 1000 steps keeps 90 %
    of the start, a LoRA at about a tenth of its strength (with init_lora the start is that file's
    LoRA). With ema_update_every over `total` (no update at all) no decay helps: the warning says
    so and names ema_update_every instead. Said, not refused: it is what the user asked for, and
    the raw weights are saved beside it."""
    if cfg.ema_decay is None or total < 1:
        return None
    updates = total // cfg.ema_update_every
    share = cfg.ema_decay**updates
    if share <= EMA_START_SHARE_WARNED:
        return None
    start = (
        "init_lora's weights it started from, so it is that much that file's rather than the trained one"
        if cfg.init_lora is not None
        else "the adapter's starting weights (a fresh adapter starts as no change), so it is about that much "
        "weaker than the trained one"
    )
    if updates == 0:  # no decay helps: the EMA is never updated
        saved = (
            "init_lora's weights it started from"
            if cfg.init_lora is not None
            else "the adapter's starting weights (no change: a fresh adapter's)"
        )
        return (
            f"ema_update_every {cfg.ema_update_every} is more than this run's {total} optimizer steps: the "
            f"EMA is never updated, so the saved LoRA is {saved}, not the trained one (saved beside it as "
            f"<name>.raw.safetensors); set ema_update_every to at most {total}, or train longer"
        )
    fits = EMA_START_SHARE_WARNED ** (1 / updates)  # the decay whose share is the limit
    cadence = f", one every {cfg.ema_update_every} steps" if cfg.ema_update_every > 1 else ""
    return (
        f"ema_decay {cfg.ema_decay:g} is slow for this run of {total} optimizer steps: after its {updates} "
        f"EMA updates{cadence}, the saved LoRA keeps {share:.0%} of {start}, saved beside it as "
        f"<name>.raw.safetensors; ema_decay {math.floor(fits * 1e4) / 1e4:g} or lower keeps under "
        f"{EMA_START_SHARE_WARNED:.0%}, or train longer"
    )


def unused_steps_warning(cfg: TrainConfig, total: int) -> str | None:
    """The warning for a `steps` that an epoch run (num_epochs > 0) does not use, else None.

    With num_epochs the run's length is num_epochs x an epoch's optimizer steps (`total`), and
    `steps` is not read. A `steps` left at the family's default says nothing, but one the user
    changed (a kohya config's max_train_steps beside its epochs, `--set steps=N` on an epoch
    config) was a length they meant: said, so it is not lost silently (session 38 journey). Works
    on the resolved config too, whose every field counts as set."""
    from lorastudio import families
    from lorastudio.config import TrainConfig as Config

    if cfg.num_epochs <= 0:
        return None
    default = families.get(cfg.family).spec.defaults.get("steps", Config.model_fields["steps"].default)
    if cfg.steps == default:
        return None
    return (
        f"steps = {cfg.steps} is not used: num_epochs = {cfg.num_epochs} sets the run's length "
        f"({total} optimizer steps); remove num_epochs (or set it to 0) to train {cfg.steps} steps"
    )
