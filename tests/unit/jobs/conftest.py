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


@pytest.fixture
def wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall-time forecast read from the records' wall-clock phases, as before the contention
    rule (jobs/time_contention.py: a one-thread CPU record's CPU-clock phases over the share of a
    core measured now): for the tests of the cost model's scaling, which compare a forecast phase
    by phase with the wall-clock record it came from."""
    from lorastudio.jobs import time_forecast

    monkeypatch.setattr(time_forecast, "cpu_clocked", lambda records, device: records)
