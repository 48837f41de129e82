"""The rules a run's identity records because a later version read the same settings and files
otherwise (no torch here): the validation split's and the kohya folders' caption rule.

The split: rule 2 (session 26, RELIABILITY 372): a regularisation entry holds no image out, so a run with
`validation_split` and a regularisation entry trains (and validates on) other images than the
same run under rule 1, which took the split from every entry. Only such a run records
`holdout_rule` (runs without a regularisation entry, or without a split, hold out exactly what
they did: their checkpoints of either rule resume bitwise). A checkpoint of such a run written
without the record (rule 1) is refused on resume with the reason: continued under rule 2 it
would silently train on other images than it did (its class images held out before now train,
its validation loss measures another set), never the run it continues.

The kohya captions: rule 2 (session 26, RELIABILITY 470): a kohya folder read in place takes an
image's `.caption` as well as its `.txt` (rule 1: `.txt` only, else the folder's words). A run
with `kohya_folders` records `kohya_caption_rule`; a checkpoint without it whose dataset
fingerprint differs is refused as any changed dataset is, the problem saying that the rule, not
an edit, may be what changed (RELIABILITY 491).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

HOLDOUT_RULE = "holdout_rule"
RULE = 2  # regularisation entries hold none out (data/holdout.py)
KOHYA_CAPTION_RULE = "kohya_caption_rule"
KOHYA_RULE = 2  # a kohya folder's .caption files are read (data/kohya_captions.py)
RULE_KEYS = frozenset({HOLDOUT_RULE, KOHYA_CAPTION_RULE})


def splits_regularisation(identity: Mapping[str, Any]) -> bool:
    """Whether the run of `identity` (as recorded) has a validation split and a regularisation
    entry: the runs whose held-out images changed with rule 2."""
    entries = identity.get("datasets")
    return (
        bool(identity.get("validation_split"))
        and isinstance(entries, list)
        and any(isinstance(e, Mapping) and e.get("regularisation") is True for e in entries)
    )


def rules_record(cfg: TrainConfig) -> dict[str, int]:
    """{"holdout_rule": RULE} for a run with a validation split and a regularisation entry and
    {"kohya_caption_rule": KOHYA_RULE} for a run reading kohya folders; else neither."""
    entries = cfg.datasets or []
    record = {}
    if cfg.validation_split and any(e.regularisation for e in entries):
        record[HOLDOUT_RULE] = RULE
    if cfg.kohya_folders:
        record[KOHYA_CAPTION_RULE] = KOHYA_RULE
    return record


def kohya_caption_note(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """The note a changed dataset's problem adds when the checkpoint read its kohya folders'
    captions under an older rule than this run ("" otherwise)."""
    if saved.get("kohya_folders") is not True or KOHYA_CAPTION_RULE not in current:
        return ""
    was = saved.get(KOHYA_CAPTION_RULE, 1)
    if was == current[KOHYA_CAPTION_RULE]:
        return ""
    return (
        f" (the checkpoint read its kohya folders' captions under rule {was}, `.txt` only, else the folder's "
        "words; this version reads each image's `.caption` too (RELIABILITY 470): an image captioned by a "
        "`.caption` file now trains on it, so the run cannot continue as it was; start a new run, or finish "
        "this one with the version that wrote it)"
    )


def holdout_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """The refusal of a resume whose checkpoint split its validation images under another rule
    than this code (a checkpoint of rule 1: no record, though it split beside a regularisation
    entry); empty otherwise (the settings themselves are compared field by field)."""
    if not (splits_regularisation(saved) and splits_regularisation(current)):
        return []
    was = saved.get(HOLDOUT_RULE, 1)
    now = current.get(HOLDOUT_RULE, 1)
    if was == now:
        return []
    return [
        FieldProblem(
            "validation_split",
            f"the checkpoint held out its validation images under split rule {was} (its regularisation "
            f"images held out too), this version splits under rule {now} (regularisation images are never "
            "held out, RELIABILITY 372): resumed, the run would train and validate on other images than "
            "it did; start a new run (or finish this one with the version that wrote it)",
        )
    ]
