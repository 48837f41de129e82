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


def test_a_folder_outside_the_datasets_is_refused_naming_its_own_setting(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    """The refusal of a validation folder or an entry's path outside the datasets folder said
    "data_dir '/etc' is outside ..." under another field."""
    from PIL import Image

    (settings.datasets_dir / "shapes").mkdir(parents=True)
    for i in range(2):
        Image.new("RGB", (32, 32), (90 * i, 0, 0)).save(settings.datasets_dir / "shapes" / f"{i}.png")
    for over, field, start in (
        (
            {"validation_split": "/etc"},
            "validation_split",
            "validation_split '/etc' is outside the datasets folder",
        ),
        (
            {"data_dir": None, "datasets": [{"path": "a/../.."}]},
            "datasets.0.path",
            "path 'a/../..' must not contain",
        ),
    ):
        answer = client.post("/api/train/preflight", json={"config": flux_config(trigger_word="sks", **over)})
        assert answer.status_code == 400, answer.text
        messages = [p["message"] for p in answer.json()["problems"] if p["field"] == field]
        assert messages and messages[0].startswith(start), answer.text
