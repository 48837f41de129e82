"""Values of a training config file that were taken wrongly: a NaN or infinite number in any float
setting (TOML and JSON both carry them) is refused as not finite, naming the field (before, NaN got
a bound's message, "Input should be less than or equal to 1" for learning_rate = nan, naming a rule
the value did not break); a JSON key given twice is refused like TOML's (before, the last won)."""

from __future__ import annotations

import pytest

from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.errors import ConfigError

BASE = {"family": "sdxl", "base_model": "some/model", "data_dir": "data"}
FLOAT_FIELDS = sorted(
    n for n, f in TrainConfig.model_fields.items() if str(f.annotation) in ("float", "float | None")
)


def test_there_are_float_settings_to_check() -> None:
    assert {"learning_rate", "lora_alpha", "noise_offset", "ema_decay", "memory_budget_gb"} <= set(
        FLOAT_FIELDS
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_a_non_finite_float_setting_is_refused_as_such(field: str, value: float) -> None:
    for family in ("sdxl", "flux"):  # the first that takes the setting (guidance, flow_shift: flux)
        with pytest.raises(ConfigError) as info:
            parse_train_config({**BASE, "family": family, field: value})
        problems = {p.field: p.message for p in info.value.problems}
        if "cannot honour" not in problems.get(field, ""):
            break
    assert problems == {field: "Input should be a finite number"}, problems


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"datasets": [{"path": "data", "loss_weight": float("nan")}]}, "datasets.0.loss_weight"),
        ({"datasets": [{"path": "data", "weight": float("inf")}]}, "datasets.0.weight"),
        ({"datasets": [{"path": "data", "caption_dropout": float("nan")}]}, "datasets.0.caption_dropout"),
        (
            {
                "data_dir": "data",
                "trigger_word": "sks",
                "preservation": {"class_word": "p", "weight": float("nan")},
            },
            "preservation.weight",
        ),
    ],
)
def test_nested_float_settings_are_refused_as_not_finite(settings: dict, field: str) -> None:
    base = {k: v for k, v in BASE.items() if k != "data_dir"}
    with pytest.raises(ConfigError) as info:
        parse_train_config({**base, **settings})
    problems = {p.field: p.message for p in info.value.problems}
    assert problems.get(field) == "Input should be a finite number", problems


def test_a_json_config_with_a_key_twice_is_refused_like_a_toml_one(tmp_path) -> None:
    """TOML refuses a key given twice; JSON's parser kept the last silently (`"steps": 2, "steps":
    2000` trained 2000 steps). Both now refuse it, naming the key, at any depth."""
    from lorastudio.cli.config_file import load_config_file

    top = tmp_path / "top.json"
    top.write_text('{"family": "sdxl", "steps": 2, "steps": 2000}')
    nested = tmp_path / "nested.json"
    nested.write_text('{"datasets": [{"path": "a", "repeats": 1, "repeats": 10}]}')
    for path, key in ((top, "steps"), (nested, "repeats")):
        with pytest.raises(ConfigError) as info:
            load_config_file(path)
        assert [p.field for p in info.value.problems] == ["config"]
        assert f"the key {key!r} is given twice" in info.value.problems[0].message
    toml = tmp_path / "twice.toml"
    toml.write_text("steps = 2\nsteps = 2000\n")
    with pytest.raises(ConfigError, match="Cannot overwrite a value"):
        load_config_file(toml)
    ok = tmp_path / "ok.json"
    ok.write_text('{"steps": 2, "datasets": [{"path": "a", "repeats": 1}, {"path": "b", "repeats": 1}]}')
    assert load_config_file(ok)["steps"] == 2


@pytest.mark.parametrize(
    ("settings", "field", "named"),
    [
        ({"trigger_word": "sks\nperson"}, "trigger_word", "U+000A LINE FEED"),
        ({"trigger_word": "sks\0"}, "trigger_word", "U+0000 NULL"),
        ({"trigger_word": "\u202eskS"}, "trigger_word", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ({"default_caption": "a photo\0"}, "default_caption", "U+0000 NULL"),
        ({"default_caption": "a \u2067photo"}, "default_caption", "U+2067 RIGHT-TO-LEFT ISOLATE"),
        ({"sample_prompts": ["ok", "a \x1b[2Jdog"]}, "sample_prompts", "prompt 1 must be visible text"),
        ({"sample_prompts": [{"prompt": "a\u202ecat"}]}, "sample_prompts", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        (
            {"data_dir": None, "datasets": [{"path": "data", "trigger_word": "ohwx\r"}]},
            "datasets.0.trigger_word",
            "U+000D CARRIAGE RETURN",
        ),
        (
            {"data_dir": None, "datasets": [{"path": "data", "default_caption": "x\u2028y"}]},
            "datasets.0.default_caption",
            "U+2028 LINE SEPARATOR",
        ),
        (
            {"trigger_word": "sks", "preservation": {"class_word": "per\nson"}},
            "preservation.class_word",
            "U+000A LINE FEED",
        ),
        (
            {"trigger_word": "sks", "preservation": {"class_word": "p", "prompts": ["a\0"]}},
            "preservation.prompts",
            "prompt 0 must be visible text (line breaks allowed); it holds U+0000 NULL",
        ),
    ],
)
def test_text_written_into_captions_refuses_hidden_characters_naming_field_and_character(
    settings: dict, field: str, named: str
) -> None:
    """The trigger word, class word, default captions and prompts reach caption text, the LoRA's
    metadata and model card and the UI: a line break (one-line fields), NUL, escape or
    text-direction character is refused by the caption prefix's rule (text_rules), naming both."""
    with pytest.raises(ConfigError) as info:
        parse_train_config({k: v for k, v in {**BASE, **settings}.items() if v is not None})
    problems = {p.field: p.message for p in info.value.problems}
    assert field in problems and named in problems[field], problems


def test_visible_text_is_taken_as_given() -> None:
    """Multi-line prompts and captions, tabs, accents, CJK and emoji are not hidden characters."""
    cfg = parse_train_config(
        {
            **BASE,
            "trigger_word": "Zoë_sks 人",
            "default_caption": "a photo\nof a cat\t🐈",
            "sample_prompts": ["line one\nline two", {"prompt": "un café"}],
            "preservation": {"class_word": "personne", "prompts": ["a\nperson"]},
        }
    )
    assert (cfg.trigger_word, cfg.default_caption) == ("Zoë_sks 人", "a photo\nof a cat\t🐈")


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"steps": True}, "steps"),
        ({"learning_rate": True}, "learning_rate"),
        ({"lora_rank": True}, "lora_rank"),
        ({"resolution": [True]}, "resolution"),
        ({"rank_pattern": {"to_q": True}}, "rank_pattern"),
        ({"sample_prompts": [{"prompt": "a", "width": True}]}, "sample_prompts.0.width"),
        ({"data_dir": None, "datasets": [{"path": "a", "repeats": True}]}, "datasets.0.repeats"),
    ],
)
def test_a_boolean_is_no_number(settings: dict, field: str) -> None:
    """pydantic's lax mode read `steps = true` as 1 step and `learning_rate = true` as 1.0 (a
    TOML or JSON true, `--set steps=true`): refused, naming the setting (session 25 CLI audit).
    A boolean setting and a string of digits are still taken."""
    base = {"family": "flux", "base_model": "x", "data_dir": "y"}
    with pytest.raises(ConfigError) as info:
        parse_train_config({**base, **settings})
    problems = {p.field: p.message for p in info.value.problems}
    assert "takes no true/false" in problems.get(field, ""), problems
    ok = parse_train_config({**base, "steps": "5", "no_upscale": True})
    assert (ok.steps, ok.no_upscale) == (5, True)
