"""Another trainer's key given alone to a lorastudio config (RELIABILITY 2041): named as ours from
the importers' tables (kohya's network_args, SimpleTuner's, OneTrainer's and ai-toolkit's keys),
or as one lorastudio needs no setting for, pointing at `lorastudio config import`; a guessed name
(`checkpoint_every`) is a "did you mean". The config file and `--set` (the CLI's check) say it as
parse_train_config does, and a resume's settings too."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runner import run_cli
from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.training.identity import override_problems

BASE = {"family": "flux", "base_model": "black-forest-labs/FLUX.1-dev", "data_dir": "d"}
IMPORT = "(`lorastudio config import` converts a whole"


def _messages(**given: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_train_config({**BASE, **given})
    return {p.field: p.message for p in err.value.problems}


def test_each_trainers_key_is_named_as_ours_or_as_needing_none() -> None:
    said = _messages(
        network_args=["algo=lokr"],
        checkpointing_steps=100,
        learning_rate_warmup_steps=10,
        linear=16,
        xformers=True,
        clip_skip=2,
        checkpoint_every=50,
        max_train_steps=100,
    )
    assert said["network_args"].startswith("unknown setting; kohya's network_args is adapter")
    assert said["checkpointing_steps"] == (
        f"unknown setting; SimpleTuner's checkpointing_steps is save_every here {IMPORT} SimpleTuner file)"
    )
    assert said["learning_rate_warmup_steps"].startswith(
        "unknown setting; OneTrainer's learning_rate_warmup_steps is lr_warmup_steps here"
    )
    assert (
        said["linear"] == f"unknown setting; ai-toolkit's linear is lora_rank here {IMPORT} ai-toolkit file)"
    )
    assert said["xformers"] == (
        "unknown setting; kohya's xformers is not needed here: attention_backend auto picks the kernel "
        f"{IMPORT} kohya file)"
    )
    assert said["clip_skip"].startswith("unknown setting; kohya's clip_skip is not supported here: ")
    assert said["checkpoint_every"] == "unknown setting; did you mean save_every?"
    assert said["max_train_steps"] == (
        "unknown setting; kohya's and SimpleTuner's max_train_steps is steps here "
        f"{IMPORT} kohya or SimpleTuner file)"
    )
    assert _messages(save_evry=1)["save_evry"] == "unknown setting; did you mean save_every or sample_every?"
    assert _messages(zz_top=1)["zz_top"] == "unknown setting"
    (resume,) = override_problems({"checkpointing_steps": 5})
    assert resume.message.startswith("unknown setting: SimpleTuner's checkpointing_steps is save_every here")


def test_the_cli_check_names_a_foreign_key_of_the_file_and_of_set(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    config = tmp_path / "run.toml"
    config.write_text('family = "flux"\nbase_model = "x"\ndata_dir = "d"\nnetwork_dim = 8\n')
    code, out = run_cli(capsys, monkeypatch, "train", str(config), "--set", "checkpoint_every=5", "--check")
    assert code == 2, out
    assert "network_dim: unknown setting; kohya's network_dim is lora_rank here" in out
    assert "checkpoint_every: unknown setting; did you mean save_every?" in out


def test_a_kohya_section_is_named_as_one() -> None:
    """RELIABILITY 2120: `[training_arguments]` (sd-scripts' sectioned config) in a lorastudio config,
    or a sectioned kohya config sent to the API, was a bare "unknown setting"."""
    said = _messages(training_arguments={"max_train_steps": 100}, model_arguments={})
    for key in ("training_arguments", "model_arguments"):
        assert said[key] == (
            f"unknown setting; kohya sd-scripts' [{key}] section holds kohya's arguments, named otherwise here"
            f" {IMPORT} kohya file)"
        )
