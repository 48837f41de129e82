"""Paths typed into the API that the file system cannot take: a name over its 255-byte limit
(pathlib's is_dir / is_symlink raised ENAMETOOLONG) and `~name` of no user (expanduser raised
RuntimeError). Each was a 500; every answer is now a 4xx naming the field or the path."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from lorastudio.settings import Settings

LONG = "x" * 300  # one component over NAME_MAX
NO_USER = "~nosuchuser-lorastudio/x"


def _cases(settings: Settings, flux_config: Callable[..., dict]) -> list[tuple[str, str, dict]]:
    inside = f"{settings.datasets_dir}/{LONG}"
    return [
        ("post", "/api/train/preflight", {"config": flux_config(base_model=NO_USER)}),
        ("post", "/api/train/preflight", {"config": flux_config(data_dir=inside)}),
        ("post", "/api/train/preflight", {"config": flux_config(data_dir=None, datasets=[{"path": inside}])}),
        ("post", "/api/train/preflight", {"config": flux_config(validation_split=inside)}),
        ("post", "/api/train/preflight", {"config": flux_config(assistant_lora="/" + LONG)}),
        ("post", "/api/train/preflight", {"config": flux_config(assistant_lora=NO_USER)}),
        ("post", "/api/datasets/shapes/caption", {"model": LONG}),
        ("post", "/api/datasets/shapes/caption", {"model": "/" + LONG}),
        ("post", "/api/datasets/shapes/caption", {"model": NO_USER}),
        ("post", "/api/models/added", {"path": "/" + LONG}),
        ("post", "/api/models/added", {"path": NO_USER}),
        (
            "post",
            "/api/generate",
            {"family": "flux", "base_model": NO_USER, "prompt": "x", "steps": 1, "width": 64, "height": 64},
        ),  # fmt: skip
    ]


@pytest.mark.parametrize("case", range(12))
def test_paths_the_file_system_cannot_take_are_a_4xx(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict], case: int
) -> None:
    (settings.datasets_dir / "shapes").mkdir(parents=True)
    method, path, body = _cases(settings, flux_config)[case]
    answer = client.request(method.upper(), path, json=body)
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json().get("error") or answer.json().get("detail"), answer.text
