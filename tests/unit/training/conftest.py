"""Fixtures of the engine tests: one CPU thread (the tiny models are far faster without thread
hand-offs on a shared 2-core machine; the frozen GC generation per test is tests/conftest.py's),
a 4-image dataset with one non-square image, a config factory for short tiny-model runs, and the
session's one gloo launch of the data-parallel tests (`launched`, tests/ddp_launch.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.config import TrainConfig

if TYPE_CHECKING:
    from ddp_launch import Launched


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def small_dataset(sample_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 square images + 1 non-square image of the sample dataset, with their captions."""
    images = sorted(sample_dataset.glob("*.png"))
    square = [p for p in images if Image.open(p).size[0] == Image.open(p).size[1]][:3]
    other = [p for p in images if Image.open(p).size[0] != Image.open(p).size[1]][:1]
    assert len(square) == 3 and len(other) == 1
    out = tmp_path_factory.mktemp("small") / "small"
    out.mkdir()
    for img in square + other:
        shutil.copy(img, out / img.name)
        shutil.copy(img.with_suffix(".txt"), out / f"{img.stem}.txt")
    return out


@pytest.fixture(scope="session")
def small_pairs(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small_dataset with a control/ image per target (its colour inverse): the paired dataset of
    families that take control images."""
    from paired_dataset import with_controls

    return with_controls(small_dataset, tmp_path_factory.mktemp("small-pairs") / "small")


def short_run_settings(family: str, base_model: Path, data_dir: Path, overrides: dict) -> dict:
    """Raw settings of a short, small run on a tiny model (family-appropriate resolution and
    text length)."""
    spec = families.get(family).spec
    raw: dict = {
        "family": family,
        "base_model": str(base_model),
        "data_dir": str(data_dir),
        "resolution": max(32, 2 * spec.resolution_multiple),
        "steps": 2,
        "learning_rate": 5e-3,
        "lora_rank": 4,
        "batch_size": 2,
        "output_name": "run",
        "seed": 0,
    }
    if "max_sequence_length" in spec.supports:
        raw["max_sequence_length"] = 16
    raw.update(overrides)
    paired = (Path(str(raw["data_dir"])) / "control").is_dir()
    if spec.control_sizing is not None and paired and "control_resolution" not in overrides:
        # the pipelines' ~1 MP controls would dwarf a 32 px target: the rules' own runs are in
        # test_control_resolution
        raw["control_resolution"] = "target"
    return raw


@pytest.fixture(scope="session")
def make_config(
    tiny_model: Callable[[str], Path], small_dataset: Path, small_pairs: Path
) -> Callable[..., TrainConfig]:
    """make_config(family="flux", **overrides) -> the TrainConfig of a 2-step run (schema-checked
    only: train() itself must catch family-level problems). A pure factory: session-wide, so
    module-wide fixtures can build configs too."""

    def make(family: str = "flux", **overrides: object) -> TrainConfig:
        base = overrides.get("base_model") or tiny_model(family)
        data = small_pairs if families.get(family).spec.edit_model else small_dataset
        return TrainConfig.model_validate(short_run_settings(family, base, data, overrides))

    return make


@pytest.fixture
def run_settings() -> Callable[..., dict]:
    """short_run_settings(family, base_model, data_dir, overrides) as a fixture (for CLI configs)."""
    return short_run_settings


@pytest.fixture(scope="session")
def broken_dataset(make_config: Callable[..., TrainConfig], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The flux runs' dataset with its first image's deflate stream ending early (valid chunks:
    only a full decode refuses it)."""
    from ddp_launch import make_broken_dataset

    return make_broken_dataset(make_config().data_dir, tmp_path_factory.mktemp("broken"))


@pytest.fixture(scope="session")
def launched(
    make_config: Callable[..., TrainConfig],
    broken_dataset: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Launched:
    """The session's one launch of two gloo processes (tests/ddp_launch.py), running the
    scenarios that the session's selected tests read (test_ddp*.py)."""
    from ddp_launch import SCENARIO_TESTS, launch

    # the session's items after -m / -k deselection (pytest_collection_modifyitems has run)
    items = [item for item in request.session.items if getattr(item, "module", None) is not None]
    modules = {item.module.__name__.rpartition(".")[2]: item.module for item in items}  # type: ignore[attr-defined]
    for tests in SCENARIO_TESTS.values():  # a scenario's tests exist where their module is collected
        for test in tests:
            module, name = test.split("::")
            assert module not in modules or hasattr(modules[module], name), test
    selected = {
        (item.module.__name__.rpartition(".")[2], getattr(item, "originalname", item.name))  # type: ignore[attr-defined]
        for item in items
    }
    return launch(make_config, broken_dataset, tmp_path_factory.mktemp("ddp"), selected)
