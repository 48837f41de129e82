"""The datasets setting (config_datasets.py): data_dir is the shorthand for one entry, the
combinations that would have no one meaning are refused together, a run's folders are every
entry's (what a dataset delete checks), and the identity keeps each entry's settings but not
its folder (a moved dataset still resumes)."""

from __future__ import annotations

import pytest

from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.config_datasets import config_entries, dataset_paths
from lorastudio.errors import ConfigError
from lorastudio.training.resume.identity import run_identity

BASE = {"family": "flux", "base_model": "m"}


def _problems(raw: dict) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_train_config({**BASE, **raw})
    return {p.field: p.message for p in err.value.problems}


def test_data_dir_or_datasets_exactly_one() -> None:
    assert "set data_dir" in _problems({})["data_dir"]
    assert "both given" in _problems({"data_dir": "a", "datasets": [{"path": "b"}]})["datasets"]
    both = _problems(
        {"data_dir": "a", "datasets": [{"path": "b"}], "lora_rank": 0}
    )  # with pydantic's, at once
    assert set(both) == {"datasets", "lora_rank"}
    assert config_entries(parse_train_config({**BASE, "data_dir": "a"}))[0].path == "a"


def test_sampling_combinations_are_refused_together() -> None:
    found = _problems(
        {
            "datasets": [{"path": "a", "repeats": 2, "weight": 1.0}, {"path": "b"}],
            "control_dirs": ["c"],
        }
    )
    assert "repeats or weight, not both" in found["datasets.0"]
    assert "some entries only (not on 1)" in found["datasets"]
    assert "control/ sub-folder" in found["control_dirs"]
    kohya = _problems({"datasets": [{"path": "a", "repeats": 3}], "kohya_folders": True})
    assert "sub-folders give the repeats" in kohya["datasets.0"]
    bad = _problems({"datasets": [{"path": "a", "repeats": 0, "weight": -1, "lora": 1}]})
    assert {"datasets.0.repeats", "datasets.0.weight", "datasets.0.lora"} <= set(bad)
    assert (
        "multiple of 16"
        in _problems({"datasets": [{"path": "a", "resolution": 40}]})["datasets.0.resolution"]
    )


def test_folders_and_identity() -> None:
    cfg = TrainConfig.model_validate({**BASE, "datasets": [{"path": "/x/a", "repeats": 2}, {"path": "/x/b"}]})
    assert dataset_paths(cfg) == ["/x/a", "/x/b"]
    moved = cfg.model_copy(
        update={"datasets": [e.model_copy(update={"path": "/y" + e.path}) for e in cfg.datasets]}
    )
    assert run_identity(cfg, "fp", ("to_q",)) == run_identity(moved, "fp", ("to_q",))
    heavier = cfg.model_copy(
        update={"datasets": [cfg.datasets[0].model_copy(update={"repeats": 3}), cfg.datasets[1]]}
    )
    assert (
        run_identity(cfg, "fp", ("to_q",))["datasets"] != run_identity(heavier, "fp", ("to_q",))["datasets"]
    )


def test_a_run_level_default_every_entry_overrides_is_refused() -> None:
    """The run's caption settings are the default of each entry's own: when every entry sets its
    own, the run's value reaches no image, so it is refused by name; one entry without its own
    takes it (accepted), and the schema's default value is never a problem (forms send it)."""
    entries = [
        {"path": "a", "caption_dropout": 0.3, "default_caption": "a dog"},
        {"path": "b", "caption_dropout": 0.0, "default_caption": "a cat", "regularisation": True},
    ]
    got = _problems({"caption_dropout": 0.1, "default_caption": "a pet", "datasets": entries})
    assert set(got) == {"caption_dropout", "default_caption"}
    assert (
        "every datasets entry sets its own caption_dropout, so the run's (0.1) applies to no image"
        in (got["caption_dropout"])
    )
    parse_train_config({**BASE, "caption_dropout": 0.1, "datasets": [entries[0], {"path": "b"}]})
    parse_train_config({**BASE, "caption_dropout": 0.0, "default_caption": None, "datasets": entries})
    parse_train_config(
        {**BASE, "caption_dropout": 0.1, "data_dir": "a"}
    )  # data_dir: the run's is the entry's
