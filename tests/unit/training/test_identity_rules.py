"""Checkpoints of the rules session 26 changed (the upgrade audit; end to end: tests/upgrade/),
each record hand-written as the older code wrote it (this code's identity of the same settings
without the rule's key): a run split beside regularisation images (RELIABILITY 372) is refused
naming the split rule, not continued on other images; a kohya run whose captions changed with
the `.caption` rule (RELIABILITY 470) is refused saying the rule may be what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.config import TrainConfig
from lorastudio.training.resume.identity import identity_problems, run_identity


def _config(tmp_path: Path, **over: object) -> TrainConfig:
    raw = {"family": "flux", "base_model": str(tmp_path / "base"), "output_name": "run",
           "datasets": [{"path": str(tmp_path / "subject")}, {"path": str(tmp_path / "class"), "regularisation": True}],
           "validation_split": 0.25}  # fmt: skip
    raw.update(over)
    return TrainConfig.model_validate(raw)


def _old(identity: dict) -> dict:
    """The identity as the code before rule 2 recorded it."""
    return {k: v for k, v in identity.items() if k not in ("holdout_rule", "kohya_caption_rule")}


def test_an_old_checkpoint_split_beside_regularisation_is_refused_naming_the_rule(tmp_path: Path) -> None:
    now = run_identity(_config(tmp_path), "fp", ("to_q",))
    problems = identity_problems(_old(now), now)
    assert [p.field for p in problems] == ["validation_split"]
    assert "split rule 1" in problems[0].message and "372" in problems[0].message
    assert identity_problems(now, now) == []  # a checkpoint of this rule resumes


@pytest.mark.parametrize(
    "over",
    [{"validation_split": None}, {"datasets": None, "data_dir": "/d"}],
    ids=["no-split", "no-regularisation"],
)
def test_old_checkpoints_whose_split_did_not_change_still_resume(tmp_path: Path, over: dict) -> None:
    now = run_identity(_config(tmp_path, **over), "fp", ("to_q",))
    assert "holdout_rule" not in now and "kohya_caption_rule" not in now
    assert identity_problems(_old(now), now) == []


@pytest.mark.parametrize("files", [False, True], ids=["fingerprint", "files"])
def test_an_old_kohya_checkpoint_whose_captions_changed_names_the_caption_rule(
    tmp_path: Path, files: bool
) -> None:
    cfg = _config(
        tmp_path, datasets=None, validation_split=None, data_dir=str(tmp_path / "k"), kohya_folders=True
    )
    listed = (
        ({"2_a/x.png": ["i", "c1", "o", ""]}, {"2_a/x.png": ["i", "c2", "o", ""]}) if files else (None, None)
    )
    saved = _old(run_identity(cfg, "then", ("to_q",), files=listed[0]))
    now = run_identity(cfg, "now", ("to_q",), files=listed[1])
    (problem,) = identity_problems(saved, now)
    assert problem.field == "dataset_fingerprint" and "rule 1" in problem.message and "470" in problem.message
    (same_rule,) = identity_problems({**saved, "kohya_caption_rule": 2}, now)  # an edit under this rule
    assert "470" not in same_rule.message
    assert identity_problems(_old(now), now) == []  # no .caption file: the old checkpoint resumes
