"""The `preservation` setting of TrainConfig: differential output preservation (issue 29 part 2;
ai-toolkit's diff_output_preservation, OneTrainer's prior prediction). Runs in
training/preservation.py.

In every micro-batch, beside the usual loss, the denoiser runs on the same noisy latents and
timesteps with the batch's captions with the trigger word replaced by `class_word` (or, when
`prompts` are given, with those prompts: sample i of the dataset gets prompts[i % len]): once
with the adapter disabled and no gradient (the base model's own prediction, the target), once
with it (the prediction being trained), and weight x MSE(trained, base) is added to the loss.
The LoRA thereby learns the trigger while its output on the class stays the base model's.
Cost per micro-batch: one extra no-grad forward and one extra forward + backward (about 1.7-2x a
plain step's compute; the passes run one after another, so the peak memory is a plain step's).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from pydantic import ConfigDict, Field, field_validator

from lorastudio.config_fields_base import NumbersNotBooleans
from lorastudio.data.paths import nfc
from lorastudio.errors import FieldProblem
from lorastudio.text_rules import one_line, visible_text

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

MAX_PRESERVATION_PROMPTS = 64
COST = (
    "one extra no-grad forward + one extra forward/backward per micro-batch (about 1.7-2x a step's compute)"
)


class Preservation(NumbersNotBooleans):
    """Differential output preservation (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    class_word: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"\S",
        description="replaces the trigger word in the captions whose base-model output is preserved "
        "(e.g. 'person' for 'sks person')",
    )
    weight: float = Field(default=1.0, gt=0, le=100, description="multiplies the preservation loss")
    prompts: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PRESERVATION_PROMPTS,
        description="prompts to preserve instead of the class-word captions (dataset sample i gets prompt "
        "i modulo their number); null: the captions with the trigger word replaced",
    )

    @field_validator("weight")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @field_validator("class_word")
    @classmethod
    def _one_line_class_word(cls, v: str) -> str:
        """Put in captions in place of the trigger word (text_rules)."""
        one_line(v)
        return v

    @field_validator("prompts")
    @classmethod
    def _prompts(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and any(not p.strip() or len(p) > 2000 for p in v):
            raise ValueError("each prompt must be 1..2000 characters, not blank")
        for i, prompt in enumerate(v or []):
            visible_text(prompt, f"prompt {i}")
        return v


def preservation_problems(cfg: TrainConfig, prompt_sees_controls: bool = False) -> list[FieldProblem]:
    """Why cfg.preservation cannot be honoured (empty when it can, or when it is unset): no
    trigger word to replace (without prompts), a class_word (or a preserved prompt) holding a
    trigger word (the output preserved would be the trigger's own), the text-encoder LoRA (the class captions would
    need the encoders' LoRA disabled too), data-parallel runs (the extra backward would need its
    own gradient all-reduce), an edit family (`prompt_sees_controls`: its prompts are encoded
    with each image's controls)."""
    keep = cfg.preservation
    if keep is None:
        return []
    from lorastudio.config_datasets import effective_trigger

    problems = []
    triggers = [
        effective_trigger(t) for t in (cfg.trigger_word, *(e.trigger_word for e in cfg.datasets or []))
    ]
    if keep.prompts is None and not any(triggers) and not cfg.kohya_folders:
        problems.append(
            FieldProblem(
                "preservation",
                "needs a trigger_word (the run's or an entry's) to replace by class_word, or prompts",
            )
        )
    elif keep.prompts is None and not cfg.kohya_folders:
        problems += [
            FieldProblem(f"datasets.{i}.trigger_word", "none (nor the run's): preservation would keep the base "
                         "model's output on this entry's own captions, undoing what it trains; give it one, "
                         "mark it regularisation, or give preservation.prompts")
            for i, e in enumerate(cfg.datasets or [])
            if not e.regularisation and effective_trigger(cfg.trigger_word if e.trigger_word is None else e.trigger_word) is None
        ]  # fmt: skip
    if cfg.train_text_encoder:
        problems.append(
            FieldProblem("preservation", "not with train_text_encoder (the base prediction would need the "
                         "text encoders' LoRA disabled too)")
        )  # fmt: skip
    for trigger in sorted({t for t in triggers if t}):
        if _has_word(keep.class_word, trigger) and keep.prompts is None:
            problems.append(
                FieldProblem("preservation.class_word", f"holds the trigger word {trigger!r}: the preserved "
                             "captions would keep it, pulling the LoRA back to the base model on the trigger")
            )  # fmt: skip
        problems += [
            FieldProblem(f"preservation.prompts.{i}", f"holds the trigger word {trigger!r}: its output is "
                         "preserved, so the LoRA would not learn the trigger")
            for i, prompt in enumerate(keep.prompts or [])
            if _has_word(prompt, trigger)
        ]  # fmt: skip
    if cfg.num_gpus > 1:
        problems.append(FieldProblem("preservation", "runs on one GPU (num_gpus 1) for now"))
    if prompt_sees_controls:
        problems.append(
            FieldProblem("preservation", "not for an edit family (its prompts are encoded with each image's "
                         "control images)")
        )  # fmt: skip
    return problems


def _has_word(text: str, word: str) -> bool:
    """Whether `word` occurs in `text` as a whole word (as data/preservation_texts.replace_trigger
    finds it: in NFC, RELIABILITY 1030)."""
    return re.search(rf"(?<!\w){re.escape(nfc(word))}(?!\w)", nfc(text)) is not None


def preservation_line(cfg: TrainConfig, samples: int | None = None) -> str | None:
    """The preflight's line: what is preserved, its weight and the cost per step (None: off).
    `samples`: the run's dataset items (each takes one prompt: more prompts than items are
    named as unused)."""
    keep = cfg.preservation
    if keep is None:
        return None
    what = (
        f"{len(keep.prompts)} prompt(s)"
        if keep.prompts
        else f"the captions with the trigger word replaced by {keep.class_word!r}"
    )
    line = f"the base model's output on {what}, weight {keep.weight:g}: {COST}"
    if keep.prompts and samples is not None and len(keep.prompts) > samples:
        line += f"; only the first {samples} prompt(s) are used (dataset sample i takes prompt i)"
    return line
