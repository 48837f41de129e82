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
from lorastudio.generation_rules import GUIDANCE_MAX, SEED_MAX, size_problems
from lorastudio.jobs.generation import budget_problems


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
