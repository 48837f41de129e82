"""The `datasets` setting of TrainConfig: several dataset folders in one run (issue 29 part 1).

Each entry is a folder (a stored dataset name or a path, as `data_dir` accepts) with its own
sampling (`repeats`, or a sampling `weight`), caption options (`trigger_word`,
`default_caption`, `caption_dropout`; unset: the run's), `resolution` (unset: the run's) and
`loss_weight`. `data_dir` stays as shorthand for one entry with the run's options; giving both
is refused.

Sampling, per epoch (data/mix.py does the counting):
- `repeats` N: every image of the entry N times (kohya's N_name folders; the default is 1);
- `weight` w: the entry's share of the epoch is w / (sum of the weights), an epoch being as many
  samples as there are items in all entries (an image at k resolutions is k items); an entry gets exactly its share (rounded by
  largest remainder), its images as evenly as possible (every image floor(share / images) times,
  the rest a seeded draw that changes every epoch). Either every entry sets `weight` or none
  does (a mix would have no one meaning of an epoch), and an entry sets at most one of the two.

An entry with `regularisation = true` holds class images with their captions (kohya's reg
folders, for prior preservation): it is mixed by its repeats / weight like any entry (not paired
1:1 with the training images per epoch as kohya does: give it the weight or repeats that
reproduce the share you want; kohya's pairing is an equal share, e.g. weight 1 beside weight 1),
its samples' loss is multiplied by the run's `prior_loss_weight` (and its own loss_weight), and
it never gets the run's trigger_word (its own, if set, applies). With `prior_prediction = true`
its samples' target is the base model's own prediction (the LoRA disabled, one extra no-grad
forward for a batch holding such samples) instead of the noise target (OneTrainer's prior
prediction; training/preservation.py).

With `kohya_folders = true` every entry (or data_dir) is a folder of kohya `N_words` sub-folders
(data/kohya.py): each sub-folder becomes an entry of its own with repeats N, the first word as
its trigger word and the words as the caption of images without one (an image's caption: its
`.txt` or `.caption`, read as `datasets import --kohya` reads it, data/kohya_captions.py); the entry's other options
carry over to them (its repeats / weight cannot be set: the names give them).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, field_validator

from lorastudio.config_fields_base import NumbersNotBooleans
from lorastudio.errors import FieldProblem
from lorastudio.text_rules import DefaultCaption, TriggerWord

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

MAX_DATASET_ENTRIES = 32
MAX_REPEATS = 10_000  # an entry's repeats (a kohya N_words folder's N too: data/kohya.py)
MAX_RESOLUTIONS = 8


def check_resolution(value: int | list[int] | None) -> int | list[int] | None:
    """Validate a `resolution` setting: one side, or a list of 1..MAX_RESOLUTIONS distinct
    sides, each 16..4096 pixels (issue 29 part 5: several resolutions in one run).
    Raises ValueError saying why."""
    sides = [value] if isinstance(value, int) else value or []
    if isinstance(value, list) and not 1 <= len(value) <= MAX_RESOLUTIONS:
        raise ValueError(f"give 1 to {MAX_RESOLUTIONS} resolutions (got {len(value)})")
    bad = [s for s in sides if not 16 <= s <= 4096]
    if bad:
        raise ValueError(f"each side must be 16..4096 pixels (got {bad})")
    if len(set(sides)) != len(sides):
        raise ValueError("a resolution is listed twice")
    return value


def resolution_list(value: int | list[int] | None) -> list[int]:
    """The sides of a `resolution` setting, in the order given ([] for None)."""
    return [value] if isinstance(value, int) else list(value or [])


def top_resolution(value: int | list[int] | None) -> int:
    """The largest side of a `resolution` setting (0 for None): what samples, the attention
    probe and the memory estimate size for."""
    return max(resolution_list(value), default=0)


class DatasetEntry(NumbersNotBooleans):
    """One dataset folder of a run and how it is sampled and captioned (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    path: str = Field(
        min_length=1, description="dataset folder (absolute, or a name under datasets/), as data_dir"
    )
    repeats: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REPEATS,
        description="every image N times per epoch (null: 1, or the weight)",
    )
    weight: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="sampling weight: the entry's share of an epoch is weight / sum of the weights "
        "(every entry sets one, or none does)",
    )
    trigger_word: TriggerWord | None = Field(default=None, description="null: the run's trigger_word")
    default_caption: DefaultCaption | None = Field(
        default=None, description="null: the run's default_caption"
    )
    caption_dropout: float | None = Field(
        default=None, ge=0.0, lt=1.0, description="null: the run's caption_dropout"
    )
    resolution: int | list[int] | None = Field(
        default=None, description="training side(s) of this entry's images, as the run's (null: the run's)"
    )
    shuffle_tags: bool | None = Field(default=None, description="null: the run's shuffle_tags")
    keep_tokens: int | None = Field(default=None, ge=0, le=100, description="null: the run's keep_tokens")
    tag_dropout: float | None = Field(default=None, ge=0.0, lt=1.0, description="null: the run's tag_dropout")
    loss_weight: float = Field(
        default=1.0, gt=0, le=100, description="multiplies the loss of this entry's samples"
    )
    regularisation: bool = Field(
        default=False,
        description="class images with their captions (kohya's reg folders): sampled like any entry, "
        "their loss also multiplied by the run's prior_loss_weight; never given the run's trigger_word",
    )
    prior_prediction: bool = Field(
        default=False,
        description="with regularisation: its samples' loss target is the base model's own prediction (the "
        "LoRA disabled) on the same noisy latents instead of the noise target (OneTrainer's prior prediction)",
    )

    @field_validator("resolution")
    @classmethod
    def _sides(cls, v: int | list[int] | None) -> int | list[int] | None:
        return check_resolution(v)

    @field_validator("weight", "loss_weight", "caption_dropout")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v


def dataset_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """Why the run's dataset settings cannot be honoured together (empty when they can): neither
    or both of data_dir and datasets, an entry with both repeats and weight, weights on some
    entries only, repeats / weight with kohya_folders, control_dirs with several entries, caption
    settings that nothing varies, a run-level setting that every entry overrides."""
    problems = raw_dataset_problems({"data_dir": cfg.data_dir, "datasets": cfg.datasets})
    entries = cfg.datasets or []
    weighted = [i for i, e in enumerate(entries) if e.weight is not None]
    for i, entry in enumerate(entries):
        if entry.weight is not None and entry.repeats is not None:
            problems.append(
                FieldProblem(f"datasets.{i}", "set repeats or weight, not both (see the datasets help)")
            )
        if cfg.kohya_folders and (entry.weight is not None or entry.repeats is not None):
            problems.append(
                FieldProblem(
                    f"datasets.{i}",
                    "kohya_folders: the N_name sub-folders give the repeats; remove repeats / weight",
                )
            )
    if cfg.control_dirs and (len(entries) > 1 or cfg.kohya_folders):
        problems.append(
            FieldProblem(
                "control_dirs",
                "parallel control folders pair with one dataset folder; with several entries put a "
                "control/ sub-folder in each entry instead",
            )
        )
    problems += caption_problems(cfg) + regularisation_problems(cfg) + overridden_problems(cfg)
    if weighted and len(weighted) != len(entries):
        missing = ", ".join(str(i) for i in range(len(entries)) if i not in weighted)
        problems.append(
            FieldProblem(
                "datasets",
                f"weight is set on some entries only (not on {missing}): set it on every entry, or use "
                "repeats everywhere",
            )
        )
    return problems


def regularisation_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """prior_prediction on an entry that is not a regularisation one, or with train_text_encoder
    (its target, the base model's prediction, would see the captions through the text encoders'
    LoRA), prior_loss_weight without a regularisation entry (it would be ignored), or every entry
    a regularisation one (nothing of the subject to learn)."""
    entries = cfg.datasets or []
    regs = [e.regularisation for e in entries]
    problems = [
        FieldProblem(f"datasets.{i}.prior_prediction", "needs regularisation = true (class images)")
        for i, e in enumerate(entries)
        if e.prior_prediction and not e.regularisation
    ]
    problems += [
        FieldProblem(f"datasets.{i}.prior_prediction", "not with train_text_encoder (the base model's "
                     "prediction, its target, would need the text encoders' LoRA disabled too)")
        for i, e in enumerate(entries)
        if e.prior_prediction and e.regularisation and cfg.train_text_encoder
    ]  # fmt: skip
    if cfg.prior_loss_weight != 1.0 and not any(regs):
        problems.append(
            FieldProblem("prior_loss_weight", "needs a datasets entry with regularisation = true")
        )
    if regs and all(regs):
        problems.append(
            FieldProblem("datasets", "every entry is a regularisation entry: add the images to learn")
        )
    return problems


# Run-level settings that are only the default of each datasets entry's own (data/entries.py
# picks the entry's when set); the run's resolution and trigger_word are also read elsewhere
# (sample size, the sidecar, preservation), so they are not here.
ENTRY_DEFAULTS: tuple[str, ...] = (
    "default_caption",
    "caption_dropout",
    "shuffle_tags",
    "keep_tokens",
    "tag_dropout",
)


def overridden_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """A run-level ENTRY_DEFAULTS setting given a value (other than its schema default) while
    every datasets entry sets its own: it applies to no image, so it would be ignored."""
    entries = cfg.datasets or []
    if not entries:
        return []
    fields = type(cfg).model_fields
    return [
        FieldProblem(
            name,
            f"every datasets entry sets its own {name}, so the run's ({getattr(cfg, name)!r}) applies to "
            "no image (it would be ignored): remove it, or leave it unset on the entries it should reach",
        )
        for name in ENTRY_DEFAULTS
        if getattr(cfg, name) != fields[name].default and all(getattr(e, name) is not None for e in entries)
    ]


def caption_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """keep_tokens or caption_variants where no caption varies (they would be ignored)."""
    entries = cfg.datasets or [DatasetEntry(path="-")]
    varies = any(
        (cfg.shuffle_tags if e.shuffle_tags is None else e.shuffle_tags)
        or (cfg.tag_dropout if e.tag_dropout is None else e.tag_dropout) > 0
        for e in entries
    )
    if varies:
        return []
    why = "needs shuffle_tags or tag_dropout (no caption varies)"
    problems = [FieldProblem(name, why) for name in ("keep_tokens", "caption_variants") if getattr(cfg, name)]
    problems += [
        FieldProblem(f"datasets.{i}.keep_tokens", why)
        for i, e in enumerate(cfg.datasets or [])
        if e.keep_tokens
    ]
    return problems


def raw_dataset_problems(data: Mapping[str, Any]) -> list[FieldProblem]:
    """The data_dir / datasets presence rule on raw settings (reported beside pydantic's
    problems when the config does not validate, so every problem still comes at once)."""
    given = [k for k in ("data_dir", "datasets") if data.get(k) is not None]
    if not given:
        return [FieldProblem("data_dir", "set data_dir (one dataset folder) or datasets (several)")]
    if len(given) == 2:
        return [FieldProblem("datasets", "data_dir and datasets are both given: data_dir is the shorthand "
                             "for one entry; keep one of them")]  # fmt: skip
    return []


def side_problems(
    field: str, value: int | list[int] | None, multiple: int, family: str
) -> list[FieldProblem]:
    """Why the training sides of `value` (a `resolution` setting) cannot be trained by `family`,
    whose sides are multiples of `multiple`: one not a multiple; one under two multiples, the
    least the buckets take (data/buckets.resolution_problems, which the dataset scan asks too:
    a config that passed here reported it there under data_dir, a field the user did not set
    wrong). Each named `field`."""
    sides = resolution_list(value)
    problems = []
    if any(side % multiple for side in sides):
        problems.append(FieldProblem(field, f"must be a multiple of {multiple} for {family}"))
    if any(side < 2 * multiple for side in sides):
        problems.append(
            FieldProblem(
                field, f"must be at least {2 * multiple} for {family} (two of its {multiple}-pixel steps)"
            )
        )
    return problems


def resolution_entry_problems(cfg: TrainConfig, multiple: int, family: str) -> list[FieldProblem]:
    """Entries whose resolution the family cannot train (side_problems)."""
    return [
        problem
        for i, e in enumerate(cfg.datasets or [])
        for problem in side_problems(f"datasets.{i}.resolution", e.resolution, multiple, family)
    ]


def config_entries(cfg: TrainConfig) -> list[DatasetEntry]:
    """The run's entries as configured: `datasets`, or one entry for `data_dir`."""
    if cfg.datasets is not None:
        return list(cfg.datasets)
    return [DatasetEntry(path=str(cfg.data_dir))] if cfg.data_dir is not None else []


def dataset_paths(cfg: TrainConfig) -> list[str]:
    """Every folder the run names (data_dir, or each entry's path), in order."""
    return [e.path for e in config_entries(cfg)]


def effective_trigger(word: str | None) -> str | None:
    """A trigger_word as the captions get it (data/captions.apply_trigger): stripped; None when
    unset or blank. Whatever finds the trigger in a caption (caption variants, preservation)
    looks for this form."""
    word = word.strip() if word is not None else None
    return word or None


def read_folders(cfg: TrainConfig, datasets_dir: Path) -> list[Path]:
    """Every folder the run reads images from, in order, resolved (a name is under
    `datasets_dir`): its datasets (`dataset_paths`), its control_dirs folders and the validation
    folder (validation_split given as a folder). What a run claims for reading, and what dataset
    edits, deletes and caption jobs are refused on while it is live."""
    return [folder for _, folder in read_folder_fields(cfg, datasets_dir)]


def read_folder_fields(cfg: TrainConfig, datasets_dir: Path) -> list[tuple[str, Path]]:
    """`read_folders` with the setting that names each folder ("data_dir" / "datasets",
    "control_dirs", "validation_split"): a problem of one (gone since the run's checks) names its
    setting. A control_dirs folder is often a dataset of its own under datasets/ (ai-toolkit's
    layout: the targets in one folder, the controls in another): unclaimed, it could be deleted,
    renamed or rewritten under a live run (RELIABILITY 1920)."""
    split = cfg.validation_split
    data_field = "data_dir" if cfg.datasets is None else "datasets"
    named = (
        [(data_field, p) for p in dataset_paths(cfg)]
        + [("control_dirs", p) for p in cfg.control_dirs]
        + ([("validation_split", split)] if isinstance(split, str) else [])
    )
    return [
        (field, Path(os.path.realpath(p if Path(p).is_absolute() else datasets_dir / p)))
        for field, p in named
    ]


def with_paths(cfg_values: dict[str, Any], cfg: TrainConfig, paths: list[str]) -> dict[str, Any]:
    """`cfg_values` with the run's dataset folders replaced by `paths` (same order as
    `dataset_paths`): data_dir for the shorthand, each entry's path otherwise."""
    if cfg.datasets is None:
        return {**cfg_values, "data_dir": paths[0]}
    entries = [e.model_copy(update={"path": p}) for e, p in zip(cfg.datasets, paths, strict=True)]
    return {**cfg_values, "datasets": entries}
