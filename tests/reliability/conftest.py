"""Fixtures of the reliability suite: settings on the per-test studio home, the sample dataset
copied in as datasets/shapes, a small flux config factory and a real uvicorn server in a thread
(real worker subprocesses)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_helpers import LiveServer, live_server

from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.fixture
def settings(studio_home: Path) -> Settings:
    return Settings(home=studio_home).ensure_dirs()


@pytest.fixture
def shapes(settings: Settings, sample_dataset: Path) -> Path:
    """datasets/shapes: a copy of the 8-image sample dataset."""
    return Path(shutil.copytree(sample_dataset, settings.datasets_dir / "shapes"))


@pytest.fixture
def flux_config(tiny_model: Callable[[str], Path]) -> Callable[..., dict]:
    """Factory of a small, valid flux training config on datasets/shapes."""

    def make(**over: object) -> dict:
        base = {
            "family": "flux",
            "base_model": str(tiny_model("flux")),
            "data_dir": "shapes",
            "resolution": 32,
            "steps": 4,
        }
        return {**base, **over}

    return make


@pytest.fixture
def server(settings: Settings, shapes: Path) -> Iterator[LiveServer]:
    with live_server(create_app(settings)) as live:
        yield live
