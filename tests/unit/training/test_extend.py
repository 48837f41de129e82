"""Training a run longer (training/extend.py) on a real tiny model, on the CPU: a finished
10-step run resumed with steps=20 equals a run of 20 steps from the start (loss curve and LoRA,
bitwise) with the constant schedule; with a decaying schedule the LR after the checkpoint is the
40-step schedule's; the extension is recorded; a finished run resumed without a larger total is
refused instead of re-running its last steps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.jobs.resume import ResumePoints, resume_points
from lorastudio.lora.file_read import read_lora_file
from lorastudio.settings import Settings
from lorastudio.training.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings
from lorastudio.training.events import Progress
from lorastudio.training.loop import TrainResult, train

# The extension (training/extend.py, the loop's schedule and checkpoints) is the same for every
# family; FLUX.1's tiny model trains these 72 steps in ~5.7 CPU s where SDXL's took 23.
FAMILY = "flux"


def _config(tiny_model, sample_dataset: Path, name: str, **over: Any) -> TrainConfig:
    raw = {
        "family": FAMILY,
        "base_model": str(tiny_model(FAMILY)),
        "data_dir": str(sample_dataset),
        "resolution": 64,
        "steps": 10,
        "learning_rate": 1e-2,
        "lora_rank": 4,
        "lora_alpha": 8.0,
        "batch_size": 1,
        "output_name": name,
        "seed": 3,
        "save_every": 5,
        **over,
    }
    return TrainConfig.model_validate(raw)


def _train(cfg: TrainConfig, home: Path, resume: Path | None = None) -> tuple[TrainResult, list[Progress]]:
    events: list[Any] = []
    result = train(cfg, events.append, settings=Settings(home=home), device="cpu", resume=resume)
    return result, [e for e in events if isinstance(e, Progress)]


def _extend(run_dir: Path, steps: int, home: Path) -> tuple[TrainResult, list[Progress]]:
    """What `lorastudio train --resume RUN --set steps=N` does."""
    checkpoint = find_checkpoint(run_dir)
    cfg = TrainConfig.model_validate(resume_settings(read_checkpoint_info(checkpoint), {"steps": steps}))
    return _train(cfg, home, run_dir)


def _cli_runs() -> list[dict[str, Any]]:
    """The runs in the run store of the CLI's studio home (LORASTUDIO_HOME)."""
    from lorastudio.jobs.store import RunStore
    from lorastudio.settings import get_settings

    store = RunStore.open(get_settings().db_path)
    try:
        return store.list_runs(10)
    finally:
        store.close()


def test_a_run_extended_from_10_to_20_steps_equals_a_20_step_run(tiny_model, sample_dataset, tmp_path):
    short, _ = _train(_config(tiny_model, sample_dataset, "ext"), tmp_path)
    run_dir = short.lora_path.parent
    with pytest.raises(ConfigError, match="finished at step 10 of 10.*set steps above 10"):
        _train(_config(tiny_model, sample_dataset, "ext"), tmp_path, run_dir)  # plain resume
    with pytest.raises(ConfigError, match="set steps above 10"):
        _extend(run_dir, 10, tmp_path)
    from lorastudio.cli.app import _register, app

    _register()
    cli = CliRunner().invoke(app, ["train", "--resume", str(run_dir), "--device", "cpu"])
    assert cli.exit_code == 2 and "finished at step 10 of 10" in cli.output, cli.output
    assert _cli_runs() == []  # refused before it is recorded, like a fresh run's refused config
    from lorastudio.training.session import resume_problems

    elsewhere = _config(tiny_model, sample_dataset, "other", steps=20)
    assert [p.field for p in resume_problems(elsewhere, find_checkpoint(run_dir))] == ["output_name"]
    before = short.lora_path.read_bytes()
    # what the Runs screen offers (jobs/resume.py): no plain resume, "train longer" from step 5
    assert resume_points(run_dir) == ResumePoints(resume_step=None, extend_from=5, total_steps=10)
    extended, _ = _extend(run_dir, 20, tmp_path)
    assert resume_points(run_dir) == ResumePoints(resume_step=None, extend_from=15, total_steps=20)
    full, _ = _train(_config(tiny_model, sample_dataset, "full", steps=20), tmp_path)

    assert extended.resumed_from == 5 and extended.steps_run == 20  # from the newest checkpoint
    assert len(extended.losses) == 20 and extended.losses == full.losses  # the whole curve, bitwise
    assert extended.losses[:10] == short.losses
    ours, _ = read_lora_file(extended.lora_path)
    theirs, _ = read_lora_file(full.lora_path)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert extended.lora_path.read_bytes() != before
    kept = run_dir / "loras" / "ext-step-000010.safetensors"  # the 10-step LoRA stays, as a snapshot
    assert kept.read_bytes() == before and json.loads(kept.with_suffix(".json").read_text())["steps"] == 10

    sidecar = json.loads(extended.lora_path.with_suffix(".json").read_text())
    assert sidecar["steps"] == sidecar["total_steps"] == 20 and sidecar["config"]["steps"] == 20
    (record,) = sidecar["extensions"]
    assert (record["from_steps"], record["to_steps"], record["resumed_at_step"]) == (10, 20, 5)
    checkpoint_info = read_checkpoint_info(find_checkpoint(run_dir))
    assert checkpoint_info["step"] == 15 and checkpoint_info["extensions"] == sidecar["extensions"]

    # a run that counts epochs is not offered "train longer" (extension_steps refuses it)
    epochs = tmp_path / "copy" / run_dir.name
    shutil.copytree(run_dir, epochs)
    info_file = find_checkpoint(epochs) / "identity.json"
    info = json.loads(info_file.read_text())
    info_file.write_text(json.dumps({**info, "config": {**info["config"], "num_epochs": 2}}))
    assert resume_points(epochs).extend_from is None


def test_an_extended_cosine_schedule_follows_the_new_total(tiny_model, sample_dataset, tmp_path):
    over = {"lr_scheduler": "cosine", "steps": 6, "save_every": 3}
    short, _ = _train(_config(tiny_model, sample_dataset, "cos", **over), tmp_path)
    _, extended = _extend(short.lora_path.parent, 12, tmp_path)
    _, full = _train(_config(tiny_model, sample_dataset, "cos-full", **{**over, "steps": 12}), tmp_path)
    assert [p.step for p in extended] == list(range(4, 13))
    assert [p.lr for p in extended] == [p.lr for p in full[3:]]  # the 12-step cosine from step 4 on
    assert extended[-1].lr > 0 and full[-1].total_steps == extended[-1].total_steps == 12
