"""One set of generation rules (lorastudio.generation_rules) for `lorastudio generate`, POST
/api/generate and the engine's generate_image: the same seed range, guidance range and size
multiple, refused with the same words before any weight loads. Before, the CLI took any seed
(2**64: a traceback after the pipeline loaded) and any guidance (inf: a NaN image written as
black; 1e308: a traceback), and the multiple rule was worded three times."""

from __future__ import annotations

import pytest
from PIL import Image
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.errors import ConfigError
from lorastudio.generate import generate_image, load_pipeline
from lorastudio.generation_rules import GUIDANCE_MAX, SEED_MAX, budget_problems, size_problems


@pytest.fixture
def no_load(monkeypatch):
    import lorastudio.generate as generate

    def refuse(*args, **kwargs):
        raise AssertionError("the pipeline was loaded before the request was checked")

    monkeypatch.setattr(generate, "load_pipeline", refuse)


def _run(tiny_model, tmp_path, *extra: str) -> str:
    _register()
    out = tmp_path / "img.png"
    args = ["generate", "--base", str(tiny_model("flux")), "--prompt", "p", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--steps", "1", "--width", "32", "--height", "32", *extra])
    assert result.exit_code == 2, result.output
    assert not out.exists()
    return " ".join(result.output.split())


@pytest.mark.parametrize("seed", [str(SEED_MAX + 1), str(2**64), "-1"])
def test_the_cli_refuses_a_seed_out_of_the_studios_range(tiny_model, tmp_path, no_load, seed):
    said = _run(tiny_model, tmp_path, "--seed", seed)
    assert f"--seed: {seed}: must be between 0 and {SEED_MAX}" in said, said


@pytest.mark.parametrize("guidance", ["inf", "nan", "1e308", str(GUIDANCE_MAX + 1), "-1"])
def test_the_cli_refuses_a_guidance_out_of_the_studios_range(tiny_model, tmp_path, no_load, guidance):
    said = _run(tiny_model, tmp_path, "--guidance", guidance)
    assert f"--guidance: {float(guidance):g}: must be a finite number between 0 and {GUIDANCE_MAX:g}" in said


def test_the_size_multiple_is_one_rule_worded_once(tiny_model, tmp_path, no_load):
    """The CLI, the API's check and the engine say the same words for the same size."""
    rule = {p.message for p in size_problems(33, 32, "flux")}
    assert rule == {"33: must be a positive multiple of 16 for flux"}
    assert {p.message for p in budget_problems(33, 32, 1, "flux")} == rule
    assert f"--width: {next(iter(rule))}" in _run(tiny_model, tmp_path, "--width", "33")


@pytest.mark.parametrize(
    ("extra", "field", "width", "height", "steps"),
    [
        (("--steps", "100000000"), "steps", 32, 32, 100000000),
        (("--steps", "0"), "steps", 32, 32, 0),
        (("--width", "1024000"), "width", 1024000, 32, 1),
        (("--width", "4096", "--height", "4096"), "width", 4096, 4096, 1),
        (("--width", "2048", "--height", "2048", "--steps", "51"), "steps", 2048, 2048, 51),
    ],
)
def test_the_cli_refuses_what_the_apis_budget_refuses_before_any_load(
    tiny_model, tmp_path, no_load, extra, field, width, height, steps
):
    """`lorastudio generate --steps 100000000` or `--width 1024000` ran (or loaded the pipeline
    first); the API refused them. One rule (generation_rules.budget_problems), the same words."""
    rule = budget_problems(width, height, steps, "flux")
    assert [p.field for p in rule] == [field], rule
    said = _run(tiny_model, tmp_path, *extra)
    assert f"--{field}: {rule[0].message}" in said, said


def test_a_sample_prompts_size_is_refused_in_the_generation_rules_words(tiny_model, tmp_path, no_load):
    """The training config's sample-prompt width / height check said "must be a multiple of 16
    for flux" while `lorastudio generate` and the API said the value and "positive multiple":
    one rule (generation_rules.side_problem), one wording."""
    from lorastudio.config_resolve import parse_train_config, resolve_train_config

    data = tmp_path / "data"
    data.mkdir()
    Image.new("RGB", (32, 32)).save(data / "a.png")
    (data / "a.txt").write_text("a")
    config = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(data),
              "sample_prompts": [{"prompt": "b", "width": 40, "height": 32}]}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        resolve_train_config(parse_train_config(config))
    said = {(p.field, p.message) for p in info.value.problems}
    rule = next(iter(size_problems(40, 32, "flux")))
    assert ("sample_prompts.0.width", rule.message) in said, said
    assert f"--width: {rule.message}" in _run(tiny_model, tmp_path, "--width", "40")


def test_the_engine_refuses_what_the_rules_refuse(tiny_model):
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    with pytest.raises(ConfigError) as info:
        generate_image(
            pipe, "flux", prompt="x", seed=2**64, steps=1, width=33, height=32, guidance=float("inf")
        )
    assert {(p.field, p.message) for p in info.value.problems} == {
        ("width", "33: must be a positive multiple of 16 for flux"),
        ("seed", f"{2**64}: must be between 0 and {SEED_MAX}"),
        ("guidance", f"inf: must be a finite number between 0 and {GUIDANCE_MAX:g}"),
    }
    image = generate_image(pipe, "flux", prompt="x", seed=SEED_MAX, steps=1, width=32, height=32)
    assert isinstance(image, Image.Image)


@pytest.mark.parametrize("side", [10**400, 10**20, -(10**400)])
def test_a_side_too_large_for_a_float_is_refused_not_a_crash(side):
    """budget_problems multiplied the sides as floats: a 400-digit width was a 500 (OverflowError)."""
    problems = budget_problems(side, 32, 1, "flux")
    assert [p.field for p in problems] == ["width"], problems
    steps = budget_problems(32, 32, 10**30, "flux")
    assert [(p.field, p.message) for p in steps] == [("steps", f"{10**30}: must be between 1 and 200")]


def test_the_clis_png_records_its_settings_and_they_render_it_again(tiny_model, tmp_path):
    """A gallery PNG carries its prompt, seed and every setting (PNG text); `lorastudio generate`
    wrote a bare PNG. Its PNG now carries the same keys, its LoRAs by file and scale, and the
    settings read back from it render the same pixels."""
    import hashlib
    import json

    import numpy as np
    import torch
    from safetensors.torch import save_file

    key = "transformer.single_transformer_blocks.0.attn.to_q"
    lora = tmp_path / "l.safetensors"
    g = torch.Generator().manual_seed(1)
    save_file({f"{key}.lora_A.weight": torch.randn(2, 32, generator=g),
               f"{key}.lora_B.weight": torch.randn(32, 2, generator=g)}, str(lora))  # fmt: skip
    _register()
    out = tmp_path / "a.png"
    args = [
        "generate",
        "--base",
        str(tiny_model("flux")),
        "--prompt",
        "猫 a cat",
        "--seed",
        "7",
        "--steps",
        "2",
    ]
    args += [
        "--width",
        "32",
        "--height",
        "32",
        "--guidance",
        "2.5",
        "--lora",
        f"{lora}:0.5",
        "--device",
        "cpu",
    ]
    assert CliRunner().invoke(app, [*args, "--out", str(out)]).exit_code == 0
    text = Image.open(out).text
    meta = json.loads(text["lorastudio"])
    assert text["prompt"] == "猫 a cat" and text["seed"] == "7"
    assert {k: meta[k] for k in ("prompt", "seed", "steps", "width", "height", "guidance", "family")} == {
        "prompt": "猫 a cat", "seed": 7, "steps": 2, "width": 32, "height": 32, "guidance": 2.5, "family": "flux"
    }  # fmt: skip
    sha = hashlib.sha256(lora.read_bytes()).hexdigest()  # the exact file (session 25 genaudit)
    assert meta["loras"] == [{"file": str(lora), "scale": 0.5, "sha256": sha}] and meta["base_model"] == str(
        tiny_model("flux")
    )
    from lorastudio.basemodels import resolve_base
    from lorastudio.jobs.generation_base import base_identity
    from lorastudio.settings import get_settings

    found = resolve_base(str(tiny_model("flux")), "flux", get_settings())
    assert meta["base_identity"] == base_identity(
        found, "transformer", None
    )  # as the gallery's (RELIABILITY 452)
    again = [
        "generate",
        "--base",
        meta["base_model"],
        "--prompt",
        meta["prompt"],
        "--seed",
        str(meta["seed"]),
    ]
    again += ["--steps", str(meta["steps"]), "--width", str(meta["width"]), "--height", str(meta["height"])]
    again += ["--guidance", str(meta["guidance"]), "--device", "cpu", "--out", str(tmp_path / "b.png")]
    again += [x for lo in meta["loras"] for x in ("--lora", f"{lo['file']}:{lo['scale']}")]
    assert CliRunner().invoke(app, again).exit_code == 0
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "b.png")), np.asarray(Image.open(out)))


@pytest.mark.parametrize(("width", "height"), [(2048, 2064), (2320, 1808)])
def test_an_area_just_over_the_budget_is_refused_in_numbers_that_differ(width, height):
    """2048x2064 was refused as "4.2 MP is over the generation budget of 4.2 MP per image": both
    rounded to one decimal. The refusal gives the exact pixel counts (2320x1808 is 256 pixels over)."""
    (problem,) = budget_problems(width, height, None, "flux")
    assert problem.field == "width"
    assert problem.message == (
        f"{width}x{height} = {width * height:,} pixels is over the generation budget of 4,194,304 pixels "
        "(2048x2048) per image"
    )


def test_the_cli_refuses_a_text_length_the_family_cannot_read_before_any_load(tiny_model, tmp_path, no_load):
    """`generate --max-sequence-length` (RELIABILITY 810): over FLUX.1's 512 tokens or under 1, and
    for SDXL (whose CLIP reads a fixed 77), refused with the reason before the pipeline loads."""
    said = _run(tiny_model, tmp_path, "--max-sequence-length", "513")
    assert (
        "--max-sequence-length: 513: must be between 1 and 512: FLUX.1's text encoder takes at most 512"
        in said
    )
    _register()
    out = tmp_path / "img.png"
    sdxl = ["generate", "--base", str(tiny_model("sdxl")), "--prompt", "p", "--out", str(out)]
    result = CliRunner().invoke(app, [*sdxl, "--max-sequence-length", "77"])
    assert result.exit_code == 2 and "fixed 77 tokens" in result.output and not out.exists()


def test_the_engine_reads_the_prompt_to_the_length_asked_and_records_it(tiny_model, tmp_path):
    """generate_image takes max_sequence_length (refused for SDXL and past the cap as the rules
    say); the CLI's PNG records it and renders at it: 4 tokens is another image than 512."""
    import json

    import numpy as np

    with pytest.raises(ConfigError) as info:
        generate_image(load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu"), "sdxl", prompt="x",
                       seed=0, steps=1, width=64, height=64, max_sequence_length=77)  # fmt: skip
    assert [p.field for p in info.value.problems] == ["max_sequence_length"]
    _register()
    args = ["generate", "--base", str(tiny_model("flux")), "--prompt", "a red circle on a blue square",
            "--steps", "2", "--width", "32", "--height", "32", "--device", "cpu"]  # fmt: skip
    cut, full = tmp_path / "cut.png", tmp_path / "full.png"
    made = CliRunner().invoke(app, [*args, "--max-sequence-length", "4", "--out", str(cut)])
    assert made.exit_code == 0, made.output
    assert json.loads(Image.open(cut).text["lorastudio"])["max_sequence_length"] == 4
    assert CliRunner().invoke(app, [*args, "--out", str(full)]).exit_code == 0
    assert "max_sequence_length" not in json.loads(Image.open(full).text["lorastudio"])
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    again = generate_image(pipe, "flux", prompt="a red circle on a blue square", seed=0, steps=2, width=32,
                           height=32, max_sequence_length=4)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(again), np.asarray(Image.open(cut)))
    assert np.abs(np.asarray(Image.open(full), dtype=np.int16) - np.asarray(again, dtype=np.int16)).max() > 0


def test_every_family_reads_a_prompt_to_a_length_or_says_why_it_cannot():
    from lorastudio import families

    for family in families.all_families():
        spec = family.spec
        assert ("max_sequence_length" in spec.supports) != bool(spec.no_max_sequence_length), spec.name
