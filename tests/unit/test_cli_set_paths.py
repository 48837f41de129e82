"""`--set a.b.c=value` sets a value inside the config's tables and lists, by the dotted path its
problems name (session 39 CLI audit, RELIABILITY 1961): `--set datasets.0.repeats=4` was
"datasets.0.repeats: unknown setting", so one entry's change meant retyping the list as JSON."""

from __future__ import annotations

import pytest

from lorastudio.cli.config_file import apply_overrides
from lorastudio.errors import ConfigError

CONFIG = {
    "family": "flux",
    "datasets": [{"path": "a", "repeats": 2}, {"path": "b"}],
    "sample_prompts": ["x", {"prompt": "y", "seed": 3}],
}


def test_a_dotted_key_sets_inside_the_config() -> None:
    given = {k: v for k, v in CONFIG.items()}
    out = apply_overrides(
        given,
        [
            "datasets.0.repeats=4",
            "datasets.1.path=2024",  # an entry's text field keeps the text typed
            "sample_prompts.1.seed=9",
            "preservation.class_word=woman",  # a table setting the config lacks starts empty
            "rank_pattern.blocks.0.attn=8",  # the rest of the path is a module pattern's key
            "datasets.0.repeats=5",  # given twice: the last wins
        ],
    )
    assert out["datasets"] == [{"path": "a", "repeats": 5}, {"path": "2024"}]
    assert out["sample_prompts"] == ["x", {"prompt": "y", "seed": 9}]
    assert out["preservation"] == {"class_word": "woman"}
    assert out["rank_pattern"] == {"blocks.0.attn": 8}
    assert given == CONFIG and CONFIG["datasets"][0]["repeats"] == 2  # the caller's data untouched
    # a list of text keeps the text typed: a control dataset named "2024" (RELIABILITY 2013)
    texts = apply_overrides(
        {"control_dirs": ["c"], "sample_prompts": ["x"], "resolution": [512]},
        ["control_dirs.0=2024", "sample_prompts.0=7", "resolution.0=768"],
    )
    assert texts == {"control_dirs": ["2024"], "sample_prompts": ["7"], "resolution": [768]}
    # a resume's `datasets.N.path` is read flat (training/resume/relocation.with_entry_paths)
    assert apply_overrides({}, ["datasets.1.path=b"], nested=False) == {"datasets.1.path": "b"}


def test_a_dotted_key_that_leads_nowhere_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        apply_overrides(
            CONFIG,
            ["datasets.2.repeats=1", "steps.x=1", "sample_prompts.0.seed=1", "datasets..x=1", "datasets.²=1"],
        )
    assert [(p.field, p.message) for p in err.value.problems] == [
        ("--set datasets.2.repeats", "datasets has 2 entries (datasets.0 to datasets.1)"),
        ("--set steps.x", "steps is a single value, nothing inside: --set steps=VALUE"),
        ("--set sample_prompts.0.seed", "sample_prompts.0 is 'x', not a table or a list"),
        ("--set datasets..x", "an empty part in the dotted path"),
        ("--set datasets.²", "datasets has 2 entries (datasets.0 to datasets.1)"),  # was ValueError
    ]
    with pytest.raises(ConfigError, match="datasets has 2 entries"):  # an Arabic-Indic zero
        apply_overrides(CONFIG, ["datasets.\u0660.repeats=1"])
    with pytest.raises(ConfigError, match="the config has no datasets to set inside"):
        apply_overrides({"data_dir": "a"}, ["datasets.0.repeats=1"])
    # a head that is no setting stays flat: the config's check says "unknown setting"
    assert apply_overrides({}, ["nope.x=1"]) == {"nope.x": 1}
