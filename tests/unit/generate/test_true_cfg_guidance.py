"""A true-CFG family's guidance scale (Qwen-Image, Qwen-Image-Edit: `true_cfg_scale`) is applied
by its pipeline only with a negative prompt (diffusers' QwenImagePipeline runs the guidance pass
when `true_cfg_scale > 1` and a negative prompt is given). Before RELIABILITY 1560 a request's
guidance without one was taken and recorded, and rendered the pixels of no guidance at all (2, 7
and none: the same image; only a log line said so). Now the engine, `lorastudio generate` (before
the pipeline loads) and POST /api/generate(s) (tests/api/test_api_generate_negative.py) refuse it
naming the way out: a negative prompt (" " for nothing in particular) or no guidance."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.errors import ConfigError
from lorastudio.generate import generate_image, load_pipeline
from lorastudio.generation_rules import unused_guidance_problems
from lorastudio.training.sample_source import sample_source

KW = {"prompt": "a red circle", "seed": 3, "steps": 2, "width": 32, "height": 32, "max_sequence_length": 16}
WORDS = "the Qwen-Image pipeline applies its true CFG scale only with a negative prompt"


def test_the_rule_names_only_a_scale_that_would_change_nothing():
    (problem,) = unused_guidance_problems(7.0, None, "qwen-image", "--")
    assert problem.field == "--guidance" and problem.message.startswith(f"7: {WORDS}")
    assert unused_guidance_problems(2.0, "", "qwen-image-edit")  # an empty negative prompt is none
    for guidance, negative, family in [
        (None, None, "qwen-image"),  # the family's default
        (1.0, None, "qwen-image"),  # no guidance, as rendered
        (0.5, None, "qwen-image-edit"),
        (7.0, " ", "qwen-image"),  # guided against " "
        (7.0, None, "sdxl"),  # guided against the empty prompt by its pipeline
        (7.0, None, "flux"),  # a guidance embedding: one pass
    ]:
        assert unused_guidance_problems(guidance, negative, family) == [], (guidance, negative, family)


def test_the_engine_refuses_a_guidance_its_pipeline_would_not_apply(tiny_model):
    pipe = load_pipeline(str(tiny_model("qwen-image")), "qwen-image", device="cpu")

    def pixels(**kw) -> np.ndarray:
        return np.asarray(generate_image(pipe, "qwen-image", **{**KW, **kw}), dtype=np.float32)

    with pytest.raises(ConfigError) as info:
        generate_image(pipe, "qwen-image", guidance=7.0, **KW)  # before: the image of no guidance
    assert [p.field for p in info.value.problems] == ["guidance"]
    assert WORDS in info.value.problems[0].message
    plain = pixels()
    np.testing.assert_array_equal(pixels(guidance=1.0), plain)  # off, as asked
    guided = pixels(guidance=7.0, negative_prompt=" ")  # the way the refusal names: honoured
    assert np.abs(guided - plain).max() > 0


def test_the_cli_refuses_it_before_the_pipeline_loads(tiny_model, tmp_path, monkeypatch):
    import lorastudio.generate as generate

    def no_load(*args, **kwargs):
        raise AssertionError("the pipeline was loaded before the request was checked")

    monkeypatch.setattr(generate, "load_pipeline", no_load)
    _register()
    out = tmp_path / "img.png"
    args = ["generate", "--base", str(tiny_model("qwen-image")), "--prompt", "p", "--out", str(out)]
    args += ["--steps", "1", "--width", "32", "--height", "32", "--device", "cpu", "--guidance", "7"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2, refused.output
    assert f"--guidance: 7: {WORDS}" in " ".join(refused.output.split())
    assert not out.exists()
    guided = CliRunner().invoke(app, [*args, "--negative", " "])  # checked, then on to the load
    assert isinstance(guided.exception, AssertionError), guided.output


def test_a_qwen_image_preview_is_listed_at_the_scale_it_rendered_at(tmp_path):
    """A preview has no negative prompt, so a Qwen-Image preview renders unguided whatever its
    scale: the listing (what Generate renders it again with) says 1, not the prompt's or the
    family's 4, which Generate now refuses without a negative prompt. Other families keep theirs."""
    prompts = [{"prompt": "a", "guidance": 4.0}, "b"]
    config = {"base_model": "not/here", "resolution": 32, "sample_prompts": prompts}
    qwen = [sample_source({**config, "family": "qwen-image"}, tmp_path, 4, i)["guidance"] for i in (0, 1)]
    assert qwen == [1.0, 1.0] and unused_guidance_problems(1.0, None, "qwen-image") == []
    sdxl = [sample_source({**config, "family": "sdxl"}, tmp_path, 4, i)["guidance"] for i in (0, 1)]
    assert sdxl == [4.0, 5.0]


@pytest.mark.slow
def test_a_qwen_image_preview_renders_again_at_its_listed_guidance(tiny_model, sample_dataset, tmp_path):
    """A Qwen-Image run's previews (at the family's 4: a prompt's own scale above 1 is refused for
    a fresh run since RELIABILITY 1683) are Generate's pixels at what the listing says, guidance 1,
    which the rule takes."""
    from PIL import Image

    from lorastudio.config import parse_train_config
    from lorastudio.generate import apply_loras
    from lorastudio.jobs.generation_inputs import lora_file
    from lorastudio.settings import Settings
    from lorastudio.training.loop import train

    prompts = ["a red circle", {"prompt": "a dog", "seed": 7}]
    raw = {"family": "qwen-image", "base_model": str(tiny_model("qwen-image")), "data_dir": str(sample_dataset),
           "output_name": "parity-q", "resolution": 32, "steps": 1, "batch_size": 2, "lora_rank": 4,
           "learning_rate": 1e-2, "sample_prompts": prompts, "sample_steps": 2, "max_sequence_length": 16}  # fmt: skip
    settings = Settings(home=tmp_path)
    cfg = parse_train_config(raw)
    assert train(cfg, [].append, settings=settings, device="cpu").lora_path is not None
    pipe = load_pipeline(str(tiny_model("qwen-image")), "qwen-image", device="cpu")
    apply_loras(pipe, [(lora_file(settings, "parity-q", 1), 1.0)])
    for index, prompt in enumerate(["a red circle", "a dog"]):
        source = sample_source(cfg.model_dump(mode="json"), settings.outputs_dir / "parity-q", 1, index)
        assert source["guidance"] == 1.0
        image = generate_image(
            pipe, "qwen-image", prompt=prompt, seed=source["seed"], steps=source["steps"], width=source["width"],
            height=source["height"], guidance=source["guidance"], max_sequence_length=source["max_sequence_length"],
        )  # fmt: skip
        preview = settings.outputs_dir / "parity-q" / f"samples/step-000001-{index}.png"
        np.testing.assert_array_equal(np.asarray(image), np.asarray(Image.open(preview)))
