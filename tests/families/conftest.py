"""Fixtures of the family contract suite: one CPU thread (see tests/unit/training/conftest.py for
why), and the 4-image overfitting dataset: plain for text-to-image families, paired (targets +
control/ images) for families that take controls."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def four_images(sample_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 4 images of the sample dataset with their captions."""
    out = tmp_path_factory.mktemp("four") / "four"
    out.mkdir()
    for img in sorted(sample_dataset.glob("*.png"))[:4]:
        shutil.copy(img, out / img.name)
        shutil.copy(img.with_suffix(".txt"), out / f"{img.stem}.txt")
    return out


@pytest.fixture(scope="session")
def four_pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 4 pairs of the paired sample dataset (targets, captions, control/ images)."""
    from lorastudio.tiny.paired import make_paired_dataset

    full = make_paired_dataset(tmp_path_factory.mktemp("pairs") / "all")
    out = tmp_path_factory.mktemp("four-pairs") / "four"
    (out / "control").mkdir(parents=True)
    for img in sorted(full.glob("*.png"))[:4]:
        shutil.copy(img, out / img.name)
        shutil.copy(img.with_suffix(".txt"), out / f"{img.stem}.txt")
        shutil.copy(full / "control" / img.name, out / "control" / img.name)
    return out


@pytest.fixture(scope="session")
def training_data(
    four_images: Path, four_pairs: Path, tiny_model: Callable[[str], Path]
) -> Callable[[str], Path]:
    """family -> its 4-sample overfitting dataset (paired when its tiny checkpoint's flavour
    needs controls: the single-image Qwen-Image-Edit; the others, which also generate without,
    train text-to-image here and with references in test_reference_predict and the unit tests)."""
    from lorastudio import families

    def pick(family: str) -> Path:
        needs = families.get(family).source_control_images(tiny_model(family))[0] > 0
        return four_pairs if needs else four_images

    return pick


def controls_for(family: str, data: Path, prompt_file: Path) -> list:
    """The control images of the sample whose caption is `prompt_file` ([] for text-to-image)."""
    from PIL import Image

    from lorastudio import families

    if families.get(family).spec.control_images[1] == 0 or not (data / "control").is_dir():
        return []
    with Image.open(data / "control" / f"{prompt_file.stem}.png") as img:
        return [img.convert("RGB")]
