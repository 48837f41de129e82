"""The periodic settings against the run's length (config_schedule.py): one larger than the run's
optimizer steps falls on no step and is refused naming it and the length; keep_loras is refused
unless a snapshot writer falls on a step before the last (a run writes none at its last step, as
the real tiny run below shows); an epoch run is checked once its dataset is scanned."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.jobs.validation import validate_run
from lorastudio.lora.snapshots import list_lora_snapshots
from lorastudio.settings import Settings, get_settings
from lorastudio.training.loop import train


def _problems(raw: dict) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_train_config(raw)
    return {p.field: p.message for p in err.value.problems}


@pytest.fixture
def base(tiny_model, small_dataset) -> dict:
    return {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(small_dataset),
        "steps": 10,
    }


def test_keep_loras_with_save_lora_every_beyond_the_steps_is_refused_naming_both(base):
    got = _problems({**base, "save_lora_every": 20, "keep_loras": 2})
    assert set(got) == {"save_lora_every", "keep_loras"}
    assert "20 exceeds the run's 10 optimizer steps (steps=10)" in got["save_lora_every"]
    assert "save_lora_every=20" in got["keep_loras"] and "steps=10" in got["keep_loras"]


def test_keep_loras_with_a_writer_only_at_the_last_step_is_refused(base):
    """save_lora_every == steps is honoured (it falls on the last step, where the final LoRA is
    that step's), but it writes no snapshot for keep_loras to keep."""
    got = _problems({**base, "save_lora_every": 10, "save_every": 12, "keep_loras": 1})
    assert set(got) == {"save_every", "keep_loras"}
    assert "save_lora_every=10, save_every=12" in got["keep_loras"]
    parse_train_config({**base, "save_lora_every": 10})  # alone: accepted
    parse_train_config({**base, "save_lora_every": 10, "save_every": 9, "keep_loras": 1})  # one writes


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"save_every": 11}, "save_every"),
        ({"save_lora_every": 11}, "save_lora_every"),
        ({"sample_prompts": ["x"], "sample_every": 11}, "sample_every"),
        ({"validation_split": 0.25, "validate_every": 11}, "validate_every"),
        ({"ema_decay": 0.9, "ema_update_every": 11}, "ema_update_every"),
    ],
)
def test_a_periodic_setting_beyond_the_steps_is_refused(base, settings, field):
    got = _problems({**base, **settings})
    assert set(got) == {field} and "exceeds the run's 10 optimizer steps (steps=10)" in got[field]
    parse_train_config({**base, **settings, field: 10})  # the last step: honoured


def test_a_periodic_setting_without_its_prerequisite_is_refused_once(base):
    got = _problems({**base, "sample_every": 11})
    assert got == {"sample_every": "needs sample_prompts (there is nothing to render)"}


def test_an_epoch_run_is_checked_against_its_scanned_length(
    tiny_model, studio_home: Path, sample_dataset: Path
):
    """8 images, batch 4: 2 steps an epoch, 6 steps for 3 epochs: unknown to the config alone."""
    settings = Settings(home=studio_home).ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    raw = {
        "family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32,
        "batch_size": 4, "num_epochs": 3, "save_lora_every": 6, "keep_loras": 1, "sample_prompts": ["x"],
        "sample_every": 7, "lr_scheduler": "cosine", "lr_warmup_steps": 6, "output_name": "epochs",
    }  # fmt: skip
    parse_train_config(raw)  # the config alone cannot tell
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    got = {p.field: p.message for p in err.value.problems}
    assert set(got) == {"keep_loras", "sample_every", "lr_warmup_steps"}
    assert "the run's 6 optimizer steps (num_epochs=3)" in got["sample_every"]
    assert "save_lora_every=6" in got["keep_loras"]
    assert "6 does not end before the run's 6 optimizer steps (num_epochs=3)" in got["lr_warmup_steps"]
    validate_run(
        {**raw, "save_lora_every": 5, "sample_every": 6, "lr_warmup_steps": 5},
        settings,
        live_output_names=set(),
    )


def test_the_premise_a_run_writes_no_snapshot_at_its_last_step(make_config):
    """save_lora_every == steps writes none (what keep_loras would keep); steps - 1 writes one."""
    outputs = get_settings().outputs_dir
    train(make_config(steps=2, save_lora_every=2, output_name="end"), [].append, device="cpu")
    assert (outputs / "end" / "end.safetensors").is_file() and list_lora_snapshots(outputs / "end") == []
    train(make_config(steps=2, save_lora_every=1, keep_loras=1, output_name="one"), [].append, device="cpu")
    assert [step for step, _ in list_lora_snapshots(outputs / "one")] == [1]
