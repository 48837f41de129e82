"""A validation hold-out whose images are training images too (same bytes, whatever the file
names) measures nothing held out: all of them is refused (a copy of the dataset given as the
validation folder, a dataset of duplicates split by a fraction), some of them is named in the
preflight's warnings. Through validate_run (the job service's and the CLI's check) and the
engine's own preflight."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.jobs.hardware import host_info
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.training.preflight import preflight


@pytest.fixture
def home(studio_home: Path, sample_dataset: Path) -> Settings:
    settings = Settings(home=studio_home).ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    return settings


def _raw(model: Path, **over: object) -> dict:
    return {
        "family": "flux",
        "base_model": str(model),
        "data_dir": "shapes",
        "resolution": 32,
        "steps": 2,
        **over,
    }


def _copy_renamed(source: Path, target: Path, names: list[str]) -> list[str]:
    """Copy the named images of `source` into `target` under new names ("held-<n>.png")."""
    target.mkdir(exist_ok=True)
    out = []
    for i, name in enumerate(names):
        shutil.copy(source / name, target / f"held-{i}.png")
        (target / f"held-{i}.txt").write_text("a held image")
        out.append(f"held-{i}.png")
    return out


def test_a_renamed_copy_of_the_dataset_as_validation_folder_is_refused(tiny_model, home: Settings):
    shapes = home.datasets_dir / "shapes"
    _copy_renamed(shapes, home.datasets_dir / "copy", sorted(p.name for p in shapes.glob("*.png")))
    raw = _raw(tiny_model("flux"), validation_split="copy", output_name="copy")
    with pytest.raises(ConfigError) as err:
        validate_run(raw, home, live_output_names=set())
    (problem,) = err.value.problems
    assert problem.field == "validation_split"
    assert "all 8 validation image(s) are training images too" in problem.message
    assert "held-0.png = " in problem.message
    with pytest.raises(ConfigError, match="are training images too"):  # the engine refuses it too
        preflight(parse_train_config({**raw, "data_dir": str(shapes)}), home, "cpu")


def test_some_shared_images_are_named_in_the_preflight_warnings(tiny_model, home: Settings):
    shapes = home.datasets_dir / "shapes"
    first, second = sorted(p.name for p in shapes.glob("*.png"))[:2]
    held = home.datasets_dir / "held"
    _copy_renamed(shapes, held, [first])
    with Image.open(shapes / second) as img:  # an image the run does not train on
        fresh = img.convert("RGB")
    fresh.putpixel((0, 0), (1, 2, 3))
    fresh.save(held / "fresh.png")
    (held / "fresh.txt").write_text("a fresh image")
    run = validate_run(
        _raw(tiny_model("flux"), validation_split="held", output_name="some"), home, live_output_names=set()
    )
    assert run.holdout is not None and run.holdout.overlap == (("held-0.png", first),)
    warnings = preflight_report(run, host=host_info(), home=home.home)["dataset"]["warnings"]
    (warning,) = [w for w in warnings if "validation image" in w]
    assert (
        f"1 of 2 validation image(s) are also training images (same content): held-0.png (= {first})"
        in warning
    )


def test_a_fraction_of_a_dataset_of_duplicates_is_refused(tiny_model, home: Settings):
    """Every image twice (under two names): whatever the seed holds out has its twin in training."""
    shapes = home.datasets_dir / "shapes"
    for path in sorted(shapes.glob("*.png")):
        shutil.copy(path, shapes / f"twin-{path.name}")
        shutil.copy(path.with_suffix(".txt"), shapes / f"twin-{path.stem}.txt")
    with pytest.raises(ConfigError, match=r"the held-out 0.25 of the dataset: all 4 validation image\(s\)"):
        validate_run(
            _raw(tiny_model("flux"), validation_split=0.25, output_name="twins"),
            home,
            live_output_names=set(),
        )
