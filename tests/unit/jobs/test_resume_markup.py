"""RELIABILITY 1750: a run whose captions hold another trainer's markup (`{trigger}`, kohya's
`|||`), trained by a version before fix 1733 refused them, resumes as its checkpoint trained them
(the scan keeps them, with a warning naming them), where a fresh run on the same dataset is still
refused. Before, the resume was refused too, and no edit could let it through: a caption edited
changes the dataset's fingerprint, which the checkpoint's identity compares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError, DatasetError
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.training.preflight import preflight


def test_a_resume_keeps_captions_with_markup_a_fresh_run_is_refused(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    first, second = sorted(shapes.glob("*.txt"))[:2]
    first.write_text("{trigger} " + first.read_text())
    second.write_text("sks, woman ||| " + second.read_text())
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32,
           "steps": 2, "trigger_word": "sks", "max_sequence_length": 16}  # fmt: skip
    with pytest.raises(ConfigError) as err:  # a fresh run: the job service refuses (fix 1733)
        validate_run(raw, settings, live_output_names=set())
    assert "{trigger}" in str(err.value) and "|||" in str(err.value)
    validate_run(raw, settings, live_output_names=set(), fresh=False)  # a resume's: let through
    cfg = TrainConfig.model_validate({**raw, "data_dir": str(shapes)})
    with pytest.raises(DatasetError):  # the engine's fresh preflight
        preflight(cfg, settings, "cpu")
    run = preflight(cfg, settings, "cpu", resume=True)  # the checkpoint trained them: kept as text
    kept = {it.path.name: it.caption for it in run.scan.items}
    assert kept[first.with_suffix(".png").name].startswith("sks, {trigger} ")
    assert "|||" in kept[second.with_suffix(".png").name]
    (said,) = [w for w in run.dataset_warnings if "another trainer's markup" in w]
    assert said.startswith("2 caption(s)") and "holds {trigger}" in said and "holds |||" in said
