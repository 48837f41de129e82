"""A misspelt setting is answered with the setting meant, in the API's error body (issue 30)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.settings import Settings


def test_unknown_setting_suggests_the_close_field(
    settings: Settings, flux_config: Callable[..., dict]
) -> None:
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        resp = client.post("/api/train/preflight", json={"config": flux_config(lerning_rate=1e-4, stpes=3)})
    assert resp.status_code in (400, 422), resp.text
    text = resp.text
    assert "lerning_rate" in text and "did you mean learning_rate" in text
    assert "did you mean steps" in text
