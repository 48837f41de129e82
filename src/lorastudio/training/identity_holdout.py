"""The validation split's rule in a run's identity (no torch here).

Rule 2 (session 26, RELIABILITY 372): a regularisation entry holds no image out, so a run with
`validation_split` and a regularisation entry trains (and validates on) other images than the
same run under rule 1, which took the split from every entry. Only such a run records
`holdout_rule` (runs without a regularisation entry, or without a split, hold out exactly what
they did: their checkpoints of either rule resume bitwise). A checkpoint of such a run written
without the record (rule 1) is refused on resume with the reason: continued under rule 2 it
would silently train on other images than it did (its class images held out before now train,
its validation loss measures another set), never the run it continues.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

HOLDOUT_RULE = "holdout_rule"
RULE = 2  # regularisation entries hold none out (data/holdout.py)


def splits_regularisation(identity: Mapping[str, Any]) -> bool:
    """Whether the run of `identity` (as recorded) has a validation split and a regularisation
    entry: the runs whose held-out images changed with rule 2."""
    entries = identity.get("datasets")
    return (
        bool(identity.get("validation_split"))
        and isinstance(entries, list)
        and any(isinstance(e, Mapping) and e.get("regularisation") is True for e in entries)
    )


def holdout_record(cfg: TrainConfig) -> dict[str, int]:
    """{"holdout_rule": RULE} for a run with a validation split and a regularisation entry, else {}."""
    entries = cfg.datasets or []
    if cfg.validation_split and any(e.regularisation for e in entries):
        return {HOLDOUT_RULE: RULE}
    return {}


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
