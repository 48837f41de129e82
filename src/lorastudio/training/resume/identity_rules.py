"""The rules a run's identity records because a later version read the same settings and files
otherwise (no torch here): the validation split's and the kohya folders' caption rule, the pixel
rule, DoRA's weight-decay rule and the validation noise's rule.

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

The pixels: rule 2 (session 27, RELIABILITY 610): fixes 550, 552 and 553 read some files otherwise
(a control a pixel off its target's cover size, a mask with transparency, a PNG colour key:
data/pixel_rule.py). Only a run whose data holds such a file records `pixel_rule` (with
`pixel_rule_files`, the first file of each fix, for the refusal to name; not compared: the
dataset fingerprint covers the files); a checkpoint of such a run without the record (rule 1)
is refused on resume, naming the rule, the fix and the file. Other runs record nothing: their
checkpoints of either rule resume bitwise. Rule 3 (session 32): fixes 1036 (an image enlarged
far beyond its bucket cut from its crop's window) and 1038 (a 2/4-bit grey PNG's colour key); a
run records the rule its files need (FIX_RULE: 2 where they are of rule 2's fixes alone, as that
code recorded it), and a checkpoint is refused only over files of a fix newer than its rule.

DoRA's magnitudes: rule 2 (session 27, RELIABILITY 630): DoRA's magnitude vectors (peft's
`lora_magnitude_vector`, initialised to the base weight's row norms) are a param group of their
own with weight_decay 0 (training/optim.py), where rule 1 decayed them towards 0 with every other
adapter parameter. Unlike the rules above, the old rule is not refused: it changes no data, only
the optimizer, so a DoRA checkpoint without the record (rule 1: one group, its magnitudes
decayed) resumes under rule 1, bitwise, and keeps it (`as_checkpoint`: the resumed run's identity
takes the checkpoint's rule, so its own checkpoints say rule 1 too). A new DoRA run records
`dora_decay_rule` 2; other runs record nothing (their optimizer as before).

The validation noise: rule 2 (session 38, RELIABILITY 1681): drawn from `validation_seed` (a
setting, default 0, left out of every dump at 0 so that the version before reads what this one
writes: config_fields_training.LEFT_OUT_AT_DEFAULT) where rule 1 drew it from `seed`. A run with
a validation split records `validation_noise_rule` 2; a checkpoint without it (rule 1) resumes
under rule 1 (`as_checkpoint`, `validation_noise_seed`), and one given a validation_seed other
than 0 is refused as any setting that differs from the checkpoint. The version before refuses
to resume a rule-2 checkpoint (a key it does not know): it would measure at other noise.
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
PIXEL_RULE = "pixel_rule"
PIXEL_FILES = "pixel_rule_files"
PIXEL_RULE_NOW = 3  # rule 2: fixes 550, 552 and 553; rule 3: 1036 and 1038 (data/pixel_rule.py)
DORA_DECAY_RULE = "dora_decay_rule"
DORA_DECAY_NOW = 2  # DoRA's magnitudes in a param group of their own, weight_decay 0 (training/optim.py)
VALIDATION_NOISE_RULE = "validation_noise_rule"
VALIDATION_NOISE_NOW = 2  # the validation noise drawn from validation_seed (1: from seed)
RULE_KEYS = frozenset(
    {HOLDOUT_RULE, KOHYA_CAPTION_RULE, PIXEL_RULE, PIXEL_FILES, DORA_DECAY_RULE, VALIDATION_NOISE_RULE}
)
# what each fix of rule 2 reads otherwise (data/pixel_rule.read_otherwise's keys)
_PIXEL_FIXES = {
    "550": "a control of its target's shape whose cover size is a pixel off its target's, now cut with "
    "its target's crop and flip where it was centre-cropped",
    "552": "a mask with transparent pixels, which now weigh as black where they weighed as white",
    "553": "a PNG with a colour key, whose keyed pixels now train transparent (composited onto white) "
    "where they trained in their stored colour",
    "1036": "an image enlarged far beyond its bucket, now cut from its crop's window (its pixels within 2 "
    "levels of before)",
    "1038": "a 2- or 4-bit grey PNG with a colour key, whose keyed pixels now train transparent where they "
    "trained in their grey",
}
# The pixel rule each fix came with: a checkpoint of an older rule read that fix's files otherwise.
FIX_RULE = {"550": 2, "552": 2, "553": 2, "1036": 3, "1038": 3}


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
    """{"holdout_rule": RULE} for a run with a validation split and a regularisation entry,
    {"kohya_caption_rule": KOHYA_RULE} for a run reading kohya folders and {"dora_decay_rule":
    DORA_DECAY_NOW} for a DoRA run; else none of them."""
    entries = cfg.datasets or []
    record = {}
    if cfg.validation_split and any(e.regularisation for e in entries):
        record[HOLDOUT_RULE] = RULE
    if cfg.kohya_folders:
        record[KOHYA_CAPTION_RULE] = KOHYA_RULE
    if cfg.adapter == "dora":
        record[DORA_DECAY_RULE] = DORA_DECAY_NOW
    if cfg.validation_split is not None:
        record[VALIDATION_NOISE_RULE] = VALIDATION_NOISE_NOW
    return record


def dora_decay_rule(identity: Mapping[str, Any]) -> int:
    """The weight-decay rule of DoRA's magnitudes the run of `identity` trains under: 2 (a param
    group of their own, weight_decay 0) where it records it, else 1 (decayed with every adapter
    parameter: a DoRA checkpoint of older code; any other run has no magnitudes); -1 for a record
    that is no integer (refused: `dora_decay_problems`)."""
    rule = identity.get(DORA_DECAY_RULE, 1)
    return rule if isinstance(rule, int) and not isinstance(rule, bool) else -1


def as_checkpoint(identity: Mapping[str, Any], saved: Mapping[str, Any]) -> dict[str, Any]:
    """`identity` (this code's, of a run resuming the checkpoint whose identity is `saved`) with
    the checkpoint's DoRA weight-decay rule: a DoRA checkpoint without the record (rule 1) resumes
    under rule 1, and the run keeps it (its identity, written into its later checkpoints, has no
    record either); one of rule 2 keeps 2. Likewise the validation noise's rule: a checkpoint
    without `validation_noise_rule` (a version before validation_seed) resumes with its noise
    drawn from `seed` (`validation_noise_seed`), in its later checkpoints too. Other runs:
    `identity` as it is."""
    out = dict(identity)
    for key in (DORA_DECAY_RULE, VALIDATION_NOISE_RULE):
        if key not in identity:
            continue
        out.pop(key)
        if key in saved:
            out[key] = saved[key]
    return out


def validation_noise_seed(cfg: TrainConfig, identity: Mapping[str, Any]) -> int:
    """The seed of the run's fixed validation noise (training/validate.fixed_noise):
    `validation_seed` where the run's identity records validation noise rule 2 (every run of this
    version with a validation split), else the run's `seed` (rule 1: a run resumed from a
    checkpoint written before validation_seed, `as_checkpoint`; RELIABILITY 1681)."""
    return cfg.validation_seed if identity.get(VALIDATION_NOISE_RULE) == VALIDATION_NOISE_NOW else cfg.seed


def validation_noise_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """The refusal of a checkpoint whose validation noise rule this code does not know (a newer
    version's); empty for rule 1 (no record) and rule 2, which both resume as they were."""
    rule = saved.get(VALIDATION_NOISE_RULE, 1)
    if VALIDATION_NOISE_RULE not in current or rule in (1, VALIDATION_NOISE_NOW):
        return []
    return [
        FieldProblem(
            VALIDATION_NOISE_RULE,
            f"the checkpoint drew its validation noise under rule {rule!r}, which this version does not "
            f"know (it knows rules 1 and {VALIDATION_NOISE_NOW}): finish the run with the version that wrote it",
        )
    ]


def dora_decay_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """The refusal of a DoRA checkpoint whose weight-decay rule this code does not know (a newer
    version's); empty for rule 1 (no record) and rule 2, which both resume as they were."""
    if DORA_DECAY_RULE not in current or dora_decay_rule(saved) in (1, DORA_DECAY_NOW):
        return []
    return [
        FieldProblem(
            DORA_DECAY_RULE,
            f"the checkpoint trained DoRA's magnitudes under weight-decay rule {saved.get(DORA_DECAY_RULE)!r}, "
            f"which this version does not know (it knows rules 1 and {DORA_DECAY_NOW}): finish the run with "
            "the version that wrote it",
        )
    ]


def pixel_record(read_otherwise: Mapping[str, str]) -> dict[str, Any]:
    """The identity's record of a run whose data holds files a later pixel rule reads otherwise
    (data/pixel_rule.read_otherwise: fix -> first file): {"pixel_rule": N, "pixel_rule_files":
    ...}, N the rule of its latest fix (FIX_RULE: 2 for data of session 27's fixes alone, as that
    code recorded it; 3 with a file of 1036 or 1038); {} for a run with none (its identity as
    before the rules)."""
    if not read_otherwise:
        return {}
    rule = max(FIX_RULE.get(fix, PIXEL_RULE_NOW) for fix in read_otherwise)  # the rule these files need
    return {PIXEL_RULE: rule, PIXEL_FILES: dict(read_otherwise)}


def pixel_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """The refusal of a resume whose checkpoint read its pixels under an older rule than a file of
    this run's data needs (a checkpoint of rule 1: no record; of rule 2 over a file of 1036 or
    1038), or under a rule this version does not know; empty otherwise (a run without such
    files records nothing and is not compared; a rule-2 checkpoint over files of rule 2's fixes
    alone resumes)."""
    if PIXEL_RULE not in current:
        return []
    was, now = saved.get(PIXEL_RULE, 1), current[PIXEL_RULE]
    files = current.get(PIXEL_FILES)
    every = list(files.items()) if isinstance(files, Mapping) else []
    # a checkpoint of rule `was` read otherwise the files of the fixes that came after it (all of
    # them for a checkpoint of a rule this version does not know)
    listed = (
        every
        if not isinstance(was, int) or was > PIXEL_RULE_NOW
        else [(fix, name) for fix, name in every if FIX_RULE.get(fix, PIXEL_RULE_NOW) > was]
    )
    if was == now or not listed:
        return []
    said = "; ".join(
        f"{_PIXEL_FIXES.get(fix, 'a file read otherwise')} (RELIABILITY {fix}), e.g. {name}"
        for fix, name in listed
    )
    return [
        FieldProblem(
            PIXEL_RULE,
            f"the checkpoint read this dataset's pixels under pixel rule {was}, this version reads them under "
            f"rule {now}, and the dataset holds files the two read otherwise: {said or 'unnamed'}; resumed, "
            "the run would train on other pixels than its first steps did, so it cannot continue as it was: "
            "start a new run, or finish this one with the version that wrote it",
        )
    ]


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
