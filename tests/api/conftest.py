"""Fixtures of the API tests: settings on the per-test studio home, an in-process client of the
app, a real uvicorn server on 127.0.0.1 (in a thread of the test process), a flux config factory
and the CLI app."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer
from api_helpers import LiveServer, live_server
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings


@pytest.fixture
def settings(studio_home: Path) -> Settings:
    return Settings(home=studio_home)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The app in process (TestClient on a loopback base URL: the Host guard answers only those)."""
    with TestClient(create_app(settings), base_url=LOOPBACK) as test_client:
        yield test_client


@pytest.fixture
def server(settings: Settings) -> Iterator[LiveServer]:
    with live_server(create_app(settings)) as live:
        yield live


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


@pytest.fixture(scope="session")
def cli() -> typer.Typer:
    """The root `lorastudio` typer app with every command registered (once per session)."""
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    return app
