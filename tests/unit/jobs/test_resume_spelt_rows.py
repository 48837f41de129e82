"""The resume of a run an older lorastudio trained on a dataset whose metadata.jsonl row names an
image with its accents composed otherwise (RELIABILITY 2200): that version read the row as naming
no file, so the image trained on the trigger word; this one reads the row as the image's, so the
dataset's captions differ from the checkpoint's. The fingerprint decides (a run never continues on
other captions than it trained): the resume is refused, saying which rows and the two ways on
(delete the rows to resume as it was, or start a new run), and resumes once the rows are gone."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs.resume import validate_resume
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.training.loop import train

NFC, NFD = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))


@pytest.mark.slow  # a run trained (~10-25 s); by default test_spelt_rows.py checks the note's words
def test_an_old_runs_resume_names_the_rows_it_did_not_read_and_resumes_without_them(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    first = sorted(shapes.glob("*.png"))[0]
    first.with_suffix(".txt").unlink()
    first.rename(shapes / f"{NFC}.png")  # stored composed, as an upload stores it
    cfg = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32,
           "steps": 3, "save_every": 2, "output_name": "r", "trigger_word": "sks",
           "max_sequence_length": 16}  # fmt: skip
    run = validate_run(cfg, settings, live_output_names=set())  # as the old code trained it: no row read
    train(run.worker_config, lambda event: None, settings=settings, device="cpu")
    table = shapes / "metadata.jsonl"  # the old upload's row, as written: decomposed
    table.write_text(json.dumps({"file_name": f"{NFD}.png", "text": "a cup"}, ensure_ascii=False) + "\n")
    with pytest.raises(ConfigError) as err:
        validate_resume(settings.outputs_dir / "r", None, {"steps": 4}, settings, live_output_names=set())
    (problem,) = [p.message for p in err.value.problems if p.field == "dataset_fingerprint"]
    assert f"caption changed: {NFC}.png" in problem, problem
    assert f"metadata.jsonl row(s) {ascii(NFD + '.png')} name their image" in problem
    assert "delete those rows from metadata.jsonl" in problem and "start a new run" in problem
    table.unlink()  # the way it names: the image trains as the checkpoint trained it
    resume = validate_resume(
        settings.outputs_dir / "r", None, {"steps": 4}, settings, live_output_names=set()
    )
    assert resume.total_steps == 4
