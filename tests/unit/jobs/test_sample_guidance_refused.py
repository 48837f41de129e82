"""RELIABILITY 1682 / 1683: a sample prompt's own `guidance` that its preview would not apply is
refused for a fresh run, by the rule Generate refuses it with (generation_rules), naming the
prompt and the field ("sample_prompts.1.guidance"): above 1 on a step-distilled FLUX.2 klein,
whose pipeline runs no CFG (before: taken, listed, and Generate again refused), and above 1 on
Qwen-Image, whose true CFG needs a negative prompt that no sample prompt takes (before: a warning,
fix 1641). A resume keeps the run as it was recorded (the engine's preflight with resume=True),
told so by a warning naming the prompt (RELIABILITY 1751: before, a klein run's resume said nothing)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.generation_rules import unguided_cfg_problems
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.training.guidance_rules import sample_guidance_problems
from lorastudio.training.preflight import preflight

PROMPTS = ["plain", {"prompt": "a dog", "guidance": 4}, {"prompt": "a cat", "guidance": 1}]


def _rule(family: str, facts: dict | None, prompts: list = PROMPTS) -> dict[str, str]:
    cfg = TrainConfig.model_validate(
        {"family": family, "base_model": "/unused", "data_dir": "/unused", "sample_prompts": prompts}
    )
    return {p.field: p.message for p in sample_guidance_problems(cfg, families.get(family), facts)}


def test_the_rule_names_the_prompt_and_field_where_no_preview_applies_it():
    said = _rule("flux2-klein", {"is_distilled": True})
    assert list(said) == ["sample_prompts.1.guidance"]  # the second prompt (0-based, as the form places it)
    (generate,) = unguided_cfg_problems(4.0, False, "Flux2KleinPipeline")  # Generate's rule and words
    assert said["sample_prompts.1.guidance"] == generate.message
    assert _rule("flux2-klein", {"is_distilled": False}) == {}  # a base checkpoint guides
    assert _rule("flux2-klein", None) == {}  # facts unknown: not refused
    qwen = _rule("qwen-image", None, [{"prompt": "a dog", "guidance": 7}, "plain"])
    assert list(qwen) == ["sample_prompts.0.guidance"]
    assert "takes no negative prompt" in qwen["sample_prompts.0.guidance"]
    assert (
        _rule("flux", None) == {} and _rule("qwen-image", None, ["x", {"prompt": "y", "guidance": 1}]) == {}
    )


def test_a_distilled_klein_run_is_refused_at_submission_and_preflight_a_resume_is_not(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    distilled = settings.models_dir / "klein-distilled"
    shutil.copytree(tiny_model("flux2-klein"), distilled)
    index = json.loads((distilled / "model_index.json").read_text())
    (distilled / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    raw = {
        "family": "flux2-klein", "base_model": str(distilled), "data_dir": "shapes", "resolution": 32,
        "steps": 2, "sample_prompts": PROMPTS,
    }  # fmt: skip
    with pytest.raises(ConfigError) as err:  # the job service (the API, the web's Train form)
        validate_run(raw, settings, live_output_names=set())
    said = {p.field: p.message for p in err.value.problems}
    assert said["sample_prompts.1.guidance"].startswith(
        "4: Flux2KleinPipeline runs no classifier-free guidance"
    )
    cfg = TrainConfig.model_validate({**raw, "data_dir": str(shapes)})
    with pytest.raises(ConfigError) as err:  # the engine (train, train --check)
        preflight(cfg, settings, "cpu")
    assert "sample_prompts.1.guidance" in {p.field for p in err.value.problems}
    run = preflight(cfg, settings, "cpu", resume=True)  # recorded before the rule: resumes as it was
    assert run.cfg.sample_prompts
    (told,) = [w for w in run.dataset_warnings if "guidance" in w]  # and is told so (RELIABILITY 1751)
    assert (
        told.startswith("sample_prompts.1.guidance 4: Flux2KleinPipeline runs no")
        and "resumes as it was" in told
    )


def test_the_spec_flag_is_what_each_pipeline_does_for_a_distilled_checkpoint():
    """FamilySpec.distilled_runs_no_cfg (what a run is checked by before any load) is the loaded
    pipeline's own rule (what Generate asks): no CFG at 4 for an is_distilled checkpoint."""
    import diffusers
    from diffusers.configuration_utils import FrozenDict

    from lorastudio.generate.guidance_checks import guidance_on

    flavoured = [
        f.spec for f in families.all_families() if any("is_distilled" in v.when for v in f.spec.variants)
    ]
    assert {s.name for s in flavoured} >= {"flux2-klein"}  # the families whose variants read the flag
    for spec in flavoured:
        cls = getattr(diffusers, spec.pipeline_class)
        pipe = cls.__new__(cls)
        pipe._internal_dict = FrozenDict(is_distilled=True)  # what its `config` reads
        runs = spec.guidance != "cfg" or guidance_on(pipe, spec.guidance_kwarg, 4.0)
        assert spec.distilled_runs_no_cfg == (not runs), spec.name


def test_a_resume_answer_names_sample_guidance_no_preview_applies():
    """RELIABILITY 1872: what a resume says (jobs/resume.validate_resume: its answer's
    dataset_warnings) of a sample prompt's own guidance no preview applies: a step-distilled
    klein's per prompt, as the engine's preflight of a resume (1751), and Qwen-Image's one warning
    (1641); nothing for a klein base checkpoint, unknown facts or a family that guides."""
    from lorastudio.training.guidance_rules import resume_guidance_warnings

    def said(family: str, facts: dict | None, prompts: list = PROMPTS) -> list[str]:
        cfg = TrainConfig.model_validate(
            {"family": family, "base_model": "/unused", "data_dir": "/unused", "sample_prompts": prompts}
        )
        return resume_guidance_warnings(cfg, families.get(family), facts)

    (klein,) = said("flux2-klein", {"is_distilled": True})
    assert klein.startswith("sample_prompts.1.guidance 4: Flux2KleinPipeline runs no")
    assert "resumes as it was, its previews rendered without it" in klein
    assert said("flux2-klein", {"is_distilled": False}) == said("flux2-klein", None) == []
    (qwen,) = said("qwen-image", None, [{"prompt": "a dog", "guidance": 7}])
    assert "a dog" in qwen or "1 (7)" in qwen, qwen
    assert said("flux", None) == []
