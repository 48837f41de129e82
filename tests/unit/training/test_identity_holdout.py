"""A checkpoint written before the validation split left regularisation images alone (RELIABILITY
372) by a run with both a split and a regularisation entry: its resume is refused naming the split
rule, not continued on other images (session 26 upgrade audit). The record is hand-written as
that code wrote it: the identity of the same settings without `holdout_rule`."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.config import TrainConfig
from lorastudio.training.identity import identity_problems, run_identity


def _config(tmp_path: Path, **over: object) -> TrainConfig:
    raw = {"family": "flux", "base_model": str(tmp_path / "base"), "output_name": "run",
           "datasets": [{"path": str(tmp_path / "subject")}, {"path": str(tmp_path / "class"), "regularisation": True}],
           "validation_split": 0.25}  # fmt: skip
    raw.update(over)
    return TrainConfig.model_validate(raw)


def _old(identity: dict) -> dict:
    """The identity as the code before rule 2 recorded it."""
    return {k: v for k, v in identity.items() if k != "holdout_rule"}


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
    assert "holdout_rule" not in now
    assert identity_problems(_old(now), now) == []
