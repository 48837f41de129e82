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
from lorastudio.training.resume.identity import override_problems

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


def test_a_datasets_entrys_foreign_or_guessed_key_is_named_as_ours() -> None:
    """A `[[datasets]]` entry written as kohya's subset, ai-toolkit's item or SimpleTuner's backend
    is told what each key is here, a near name as "did you mean" (RELIABILITY 2141); the old code
    said only "unknown setting"."""
    entry = {"path": "d", "num_repeats": 3, "image_dir": "d", "flip_aug": True, "repets": 2, "zz": 1}
    with pytest.raises(ConfigError) as err:
        parse_train_config({"family": "flux", "base_model": "x", "datasets": [entry]})
    said = {p.field: p.message for p in err.value.problems}
    assert said["datasets.0.num_repeats"] == (
        "unknown setting; kohya's and ai-toolkit's num_repeats is repeats here "
        f"{IMPORT} kohya or ai-toolkit file with its datasets)"
    )
    assert said["datasets.0.image_dir"].startswith("unknown setting; kohya's image_dir is path here")
    assert said["datasets.0.flip_aug"].startswith(
        "unknown setting; kohya's flip_aug is the run's random_flip here"
    )
    assert said["datasets.0.repets"] == "unknown setting; did you mean repeats?"
    assert said["datasets.0.zz"] == "unknown setting"
    # in capitals (an environment variable's spelling), not difflib's max_bad_steps as before
    assert _messages(MAX_TRAIN_STEPS=5)["MAX_TRAIN_STEPS"].startswith(
        "unknown setting; kohya's and SimpleTuner's max_train_steps is steps here"
    )


def test_a_resumes_unknown_key_in_capitals_or_past_200_characters() -> None:
    """A resume's settings say as the config does (RELIABILITY 2142): a peer's or a guessed key in
    capitals is named as its lower-case spelling (not difflib's max_bad_steps), and a key past
    200 characters is cut in the field as config_resolve cuts it (the old code echoed it whole)."""
    (capitals,) = override_problems({"MAX_STEPS": 5})
    assert capitals.message.startswith("unknown setting: did you mean steps?; settings that may change")
    (long,) = override_problems({"k" * 5000: 1})
    assert long.field == "k" * 200 + "... (5,000 characters)"


def test_a_key_one_level_off_is_named_where_it_goes() -> None:
    """A datasets entry's key at the top of a config, a run's key inside an entry (RELIABILITY
    2144): the old code said "unknown setting" alone (`repeats`) or difflib's wrong guess
    (`loss_weight` -> prior_loss_weight, `prior_prediction` -> v_prediction)."""
    said = _messages(repeats=3, loss_weight=2.0, prior_prediction=True)
    assert said["repeats"] == (
        "unknown setting; repeats is a setting of a datasets entry, not of the run: give the folder as a "
        "[[datasets]] entry (its path, the data_dir) with repeats set there"
    )
    assert said["loss_weight"].startswith("unknown setting; loss_weight is a setting of a datasets entry")
    assert said["prior_prediction"].startswith("unknown setting; prior_prediction is a setting of a datasets")
    with pytest.raises(ConfigError) as err:
        parse_train_config({"family": "flux", "base_model": "x", "datasets": [{"path": "d", "steps": 5}]})
    assert {p.field: p.message for p in err.value.problems}["datasets.0.steps"] == (
        "unknown setting; steps is a setting of the run, not of a datasets entry: set it at the top of the config"
    )


def test_a_key_holding_a_newline_or_an_escape_stays_on_its_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """An unknown key is echoed in its problem's field with its control characters escaped
    (RELIABILITY 2145): a config key holding a newline printed a problem line of its own in the
    CLI ("  - lora_rank: fine: unknown setting"), as the key wished; a resume's too."""
    config = tmp_path / "run.toml"
    config.write_text(
        'family = "flux"\nbase_model = "x"\ndata_dir = "d"\n"a\\n  - lora_rank: fine" = 1\n"b\\u202ec" = 2\n'
    )
    code, out = run_cli(capsys, monkeypatch, "train", str(config), "--check")
    assert code == 2, out
    assert "  - a\\n  - lora_rank: fine: unknown setting" in out, out
    assert not any(line.startswith("  - lora_rank: fine") for line in out.splitlines()), out
    assert "b\\u202ec: unknown setting" in out, out
    (resumed,) = override_problems({"x\ny": 1})
    assert resumed.field == "x\\ny"
