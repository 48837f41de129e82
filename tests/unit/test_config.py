"""TrainConfig: strict, all problems at once, family defaults, family-specific refusals."""

from __future__ import annotations

import math

import pytest

from lorastudio import families
from lorastudio.config import (
    FAMILY_SPECIFIC_FIELDS,
    TrainConfig,
    parse_train_config,
    resolve_train_config,
)
from lorastudio.errors import ConfigError, UnknownFamily

BASE = {"family": "flux", "base_model": "owner/model", "data_dir": "mydata"}


def _fields(err: ConfigError) -> set[str]:
    return {p.field for p in err.problems}


def test_minimal_config_parses_and_resolves_family_defaults():
    cfg = resolve_train_config(parse_train_config(BASE))
    flux = families.get("flux").spec
    assert cfg.resolution == flux.defaults["resolution"]
    assert cfg.learning_rate == flux.defaults["learning_rate"]
    assert cfg.lora_rank == flux.defaults["lora_rank"]
    assert cfg.lora_alpha == float(cfg.lora_rank)  # alpha defaults to the rank
    assert cfg.guidance == flux.defaults["guidance"]
    assert cfg.snr_gamma is None  # a DDPM-only setting is nulled for a flow family
    assert cfg.cache_variants == 1  # no random crop/flip: every variant would be identical
    assert cfg.output_name and cfg.output_name.startswith("flux-")


def test_unknown_key_is_an_error():
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "learning_rat": 1e-4})
    assert _fields(exc.value) == {"learning_rat"}
    assert "unknown setting" in str(exc.value)


def test_several_bad_fields_are_reported_in_one_error():
    bad = {**BASE, "lora_rank": 0, "batch_size": "many", "caption_dropout": 1.5, "bogus": 1, "steps": -3}
    with pytest.raises(ConfigError) as exc:
        parse_train_config(bad)
    assert {"lora_rank", "batch_size", "caption_dropout", "bogus", "steps"} <= _fields(exc.value)
    assert len(exc.value.problems) >= 5


def test_missing_required_fields_are_all_listed():
    with pytest.raises(ConfigError) as exc:
        parse_train_config({})
    assert {"family", "base_model", "data_dir"} <= _fields(exc.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(value):
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "learning_rate": value})
    assert "learning_rate" in _fields(exc.value)


def test_unknown_family_is_a_problem_listing_valid_names():
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "family": "sd15"})
    (problem,) = exc.value.problems
    assert problem.field == "family"
    for name in families.names():
        assert name in problem.message


def test_family_problems_reported_together_with_schema_problems():
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "family": "sdxl", "guidance": 3.0, "lora_rank": -1})
    assert {"guidance", "lora_rank"} <= _fields(exc.value)


@pytest.mark.parametrize("family", families.names())
def test_each_family_refuses_the_specific_settings_it_cannot_honour(family):
    spec = families.get(family).spec
    values = {"snr_gamma": 5.0, "noise_offset": 0.05, "timestep_sampling": "uniform", "logit_mean": 0.5,
              "logit_std": 1.5, "flow_shift": 3.0, "guidance": 2.0, "max_sequence_length": 64,
              "train_text_encoder": True, "text_encoder_lr": 1e-5,
              "v_prediction": True}  # fmt: skip
    assert set(values) == set(FAMILY_SPECIFIC_FIELDS)
    for name, value in values.items():
        raw = {**BASE, "family": family, name: value}
        if name in spec.supports:  # the logit settings shape logit_normal (some families default to another)
            raw.update({"timestep_sampling": "logit_normal"} if name.startswith("logit_") else {})
            raw.update({"train_text_encoder": True} if name == "text_encoder_lr" else {})
            assert getattr(resolve_train_config(parse_train_config(raw)), name) == value
        else:
            with pytest.raises(ConfigError) as exc:
                parse_train_config(raw)
            assert _fields(exc.value) == {name}
            assert "cannot honour" in str(exc.value)


def test_logit_settings_are_refused_when_the_family_default_sampling_ignores_them():
    sigmoid = [
        n for n in families.names() if families.get(n).spec.defaults.get("timestep_sampling") == "sigmoid"
    ]
    assert sigmoid  # Chroma and Krea 2 follow ai-toolkit's default sigmoid timesteps
    for family in sigmoid:
        with pytest.raises(ConfigError) as exc:
            parse_train_config({**BASE, "family": family, "logit_std": 1.5})
        assert _fields(exc.value) == {"logit_std"} and "'sigmoid' by default" in str(exc.value)


def test_explicit_null_snr_gamma_turns_it_off_for_sdxl():
    on = resolve_train_config(parse_train_config({**BASE, "family": "sdxl"}))
    off = resolve_train_config(parse_train_config({**BASE, "family": "sdxl", "snr_gamma": None}))
    assert on.snr_gamma == families.get("sdxl").spec.defaults["snr_gamma"]
    assert off.snr_gamma is None


def test_resolution_must_match_the_family_multiple():
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "family": "sdxl", "resolution": 1000})
    assert _fields(exc.value) == {"resolution"}
    assert "multiple of 32" in str(exc.value)


def test_cache_variants_without_augmentation_is_refused():
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "cache_variants": 4})
    assert "random_crop or random_flip" in str(exc.value)
    assert resolve_train_config(parse_train_config({**BASE, "random_flip": True})).cache_variants == 2
    assert resolve_train_config(parse_train_config({**BASE, "random_crop": True})).cache_variants == 4
    with pytest.raises(ConfigError, match="only 2 distinct"):
        parse_train_config({**BASE, "random_flip": True, "cache_variants": 3})


def test_cache_settings_the_latent_cache_mode_never_reads_are_refused():
    """latent_cache_max_gb is the RAM budget of auto / memory (data/disk_cache.latent_mode
    returns disk / per-step without reading it); "off" encodes each step's crop afresh, so
    cache_variants caches nothing. The defaults a resolved config (a clone) carries pass."""
    for mode in ("disk", "off"):
        with pytest.raises(ConfigError) as exc:
            parse_train_config({**BASE, "latent_cache": mode, "latent_cache_max_gb": 2})
        assert _fields(exc.value) == {"latent_cache_max_gb"} and f"{mode!r} never reads it" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "latent_cache": "off", "random_crop": True, "cache_variants": 2})
    assert _fields(exc.value) == {"cache_variants"} and "caches none" in str(exc.value)
    off = resolve_train_config(parse_train_config({**BASE, "latent_cache": "off", "random_crop": True}))
    parse_train_config(off.model_dump(exclude={"lora_targets"}))  # its resolved cache_variants (4) passes
    parse_train_config(
        {**BASE, "latent_cache": "memory", "latent_cache_max_gb": 2, "random_crop": True, "cache_variants": 2}
    )


def test_settings_that_would_be_ignored_are_refused():
    with pytest.raises(ConfigError, match="lr_warmup_steps"):
        parse_train_config({**BASE, "lr_warmup_steps": 10})
    parse_train_config({**BASE, "lr_warmup_steps": 10, "lr_scheduler": "constant_with_warmup"})
    with pytest.raises(ConfigError, match="logit_std: only applies"):
        parse_train_config({**BASE, "timestep_sampling": "uniform", "logit_std": 2.0})


def test_a_schedule_that_would_change_nothing_is_refused():
    """cosine_with_restarts without lr_cycles would be the cosine schedule (diffusers' one cycle),
    an option of another scheduler would be ignored, and a warmup that does not end before the
    run never reaches learning_rate: each refused by its field, all at once."""
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "steps": 10, "lr_scheduler": "cosine_with_restarts", "lr_power": 2.0})
    by_field = {p.field: p.message for p in exc.value.problems}
    assert set(by_field) == {"lr_cycles", "lr_power"}
    assert "with one it is the cosine schedule" in by_field["lr_cycles"]
    assert "option of lr_scheduler 'polynomial', not 'cosine_with_restarts'" in by_field["lr_power"]
    with pytest.raises(ConfigError) as exc:
        parse_train_config(
            {**BASE, "steps": 10, "lr_scheduler": "cosine", "lr_cycles": 3, "lr_warmup_steps": 10}
        )
    by_field = {p.field: p.message for p in exc.value.problems}
    assert set(by_field) == {"lr_cycles", "lr_warmup_steps"}
    assert "10 does not end before the run's 10 optimizer steps" in by_field["lr_warmup_steps"]
    assert "use at most 9" in by_field["lr_warmup_steps"]
    with pytest.raises(ConfigError, match="lr_cycles"):
        parse_train_config({**BASE, "lr_scheduler": "cosine_with_restarts", "lr_cycles": 1})  # schema: >= 2
    parse_train_config({**BASE, "steps": 10, "lr_scheduler": "cosine_with_restarts", "lr_cycles": 2})
    parse_train_config(
        {**BASE, "steps": 10, "lr_scheduler": "polynomial", "lr_power": 0.5, "lr_warmup_steps": 9}
    )


def test_output_name_must_be_a_safe_component():
    for bad in ["../x", "a/b", ".hidden", "", "x" * 101]:
        with pytest.raises(ConfigError):
            parse_train_config({**BASE, "output_name": bad})


def test_resolve_does_not_mutate_and_is_idempotent():
    cfg = parse_train_config({**BASE, "output_name": "run1"})
    resolved = resolve_train_config(cfg)
    assert cfg.resolution is None
    assert resolve_train_config(resolved) == resolved


def test_registry_get_unknown_raises_listing_valid_names():
    with pytest.raises(UnknownFamily) as exc:
        families.get("sd3")
    assert exc.value.valid == families.names()
    assert "sdxl" in str(exc.value) and "z-image" in str(exc.value)


def test_registry_families_have_consistent_specs_and_tiny_models():
    from lorastudio.tiny import TINY_FAMILIES

    assert families.names()[:4] == ["sdxl", "flux", "qwen-image", "z-image"]  # then the newer ones
    assert len(set(families.names())) == len(families.names())
    assert set(families.names()) == set(TINY_FAMILIES)  # the contract suite trains each one
    assert "flux-kontext" in families.names()
    for fam in families.all_families():
        spec = fam.spec
        assert spec.supports <= set(FAMILY_SPECIFIC_FIELDS)
        assert set(spec.defaults) <= set(TrainConfig.model_fields)
        assert spec.defaults["resolution"] % spec.resolution_multiple == 0
        assert spec.pipeline_class in spec.accepted_pipelines


def test_a_sample_prompt_objects_problems_are_told_once_with_a_suggestion():
    """A sample prompt object with a misspelt key (`control` for `controls`) or a bad value was
    told twice, once per branch of `text | object` ("sample_prompts.0.str: Input should be a
    valid string" and "sample_prompts.0.SamplePrompt.control: unknown setting"), with no
    suggestion. Each is now one problem at the entry's key, unknown keys with a suggestion;
    a value neither text nor an object is still told as such."""
    prompts = [
        {"prompt": "a", "control": ["control/a.png"]},
        {"prompt": "b", "controls": "control/a.png"},
        "plain",
        7,
    ]
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "sample_prompts": prompts})
    problems = [(p.field, p.message) for p in exc.value.problems]
    assert ("sample_prompts.0.control", "unknown setting; did you mean controls?") in problems
    assert ("sample_prompts.1.controls", "Input should be a valid list") in problems
    assert not any(
        f.startswith(("sample_prompts.0", "sample_prompts.1"))
        and f not in ("sample_prompts.0.control", "sample_prompts.1.controls")
        for f, _ in problems
    ), problems
    assert not any(f.startswith("sample_prompts.2") for f, _ in problems)
    assert any(f.startswith("sample_prompts.3") for f, _ in problems)  # neither branch: both said


def test_unknown_setting_suggests_close_fields():
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "lerning_rate": 1e-4, "zzz_qqq": 1})
    by_field = {p.field: p.message for p in exc.value.problems}
    assert by_field["lerning_rate"] == "unknown setting; did you mean learning_rate?"
    assert by_field["zzz_qqq"] == "unknown setting"  # nothing close: no guess


def test_a_kohya_argument_is_named_as_ours_not_guessed():
    # kohya's max_train_steps was answered "did you mean max_bad_steps?" (session 39 journey4)
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "max_train_steps": 100, "network_dim": 8})
    by_field = {p.field: p.message for p in exc.value.problems}
    assert by_field["max_train_steps"] == (  # SimpleTuner's too since RELIABILITY 2041
        "unknown setting; kohya's and SimpleTuner's max_train_steps is steps here "
        "(`lorastudio config import` converts a whole kohya or SimpleTuner file)"
    )
    assert by_field["network_dim"].startswith("unknown setting; kohya's network_dim is lora_rank here")


def test_keep_loras_without_a_snapshot_writer_is_refused():
    """keep_loras bounds the LoRA snapshots a run writes while it trains: refused, by its field
    and with the other problems at once, when no setting writes any; accepted with each writer."""
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "keep_loras": 2, "lr_warmup_steps": 10})
    assert _fields(exc.value) == {"keep_loras", "lr_warmup_steps"}
    (problem,) = [p for p in exc.value.problems if p.field == "keep_loras"]
    assert "needs save_lora_every, save_every or validate_every" in problem.message
    for writer in (
        {"save_lora_every": 50},
        {"save_every": 100},
        {"validation_split": 0.2, "validate_every": 50},
    ):
        assert parse_train_config({**BASE, "keep_loras": 2, **writer}).keep_loras == 2
    assert parse_train_config(BASE).keep_loras is None  # unset: nothing to refuse


def test_family_rules_are_reported_beside_field_errors():
    """A value pydantic refuses does not hide the family's rules on the other settings (they need
    a parsed config): resolution 33 for FLUX.1 is refused together with lora_rank 0, and so are a
    max_sequence_length over the family's cap and wide compile. A combination rule is not judged
    against a refused setting's default (lr_warmup_steps beside an unknown scheduler)."""
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "resolution": 33, "lora_rank": 0, "learning_rate": -1})
    assert _fields(exc.value) == {"resolution", "lora_rank", "learning_rate"}
    assert "multiple of 16" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "seed": "x", "max_sequence_length": 4096, "compile": "wide"})
    assert _fields(exc.value) == {"seed", "max_sequence_length", "compile"}
    with pytest.raises(ConfigError) as exc:
        parse_train_config({**BASE, "lr_scheduler": "sideways", "lr_warmup_steps": 10})
    assert _fields(exc.value) == {"lr_scheduler"}
