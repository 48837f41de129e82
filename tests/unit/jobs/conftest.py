"""Fixtures of the job-service tests: settings on the per-test studio home, with the sample
dataset copied in as datasets/shapes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lorastudio.settings import Settings


@pytest.fixture
def settings(studio_home: Path) -> Settings:
    return Settings(home=studio_home).ensure_dirs()


@pytest.fixture
def shapes(settings: Settings, sample_dataset: Path) -> Path:
    """The sample dataset copied to datasets/shapes (writable)."""
    return Path(shutil.copytree(sample_dataset, settings.datasets_dir / "shapes"))
